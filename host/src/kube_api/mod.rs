//! Talking to the Kubernetes API: the host's client, with its deadlines
//! and retries ([`client`]), and the bounds every list and watch is read
//! through ([`list_bounds`]).

pub mod client;
pub mod list_bounds;
