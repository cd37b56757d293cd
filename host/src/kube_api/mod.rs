//! Talking to the Kubernetes API: the host's client, with its deadlines
//! and retries ([`client`]), the bounds every list and watch is read
//! through ([`list_bounds`]), and the owner index kept beside a watched
//! kind's cache ([`owner_index`]).

pub mod client;
pub mod list_bounds;
pub mod owner_index;
