//! Judging canary rollouts, as pure rules: the plan of steps and the
//! cohort each serves ([`plan`]), what one plugin did over a step
//! ([`tally`]), and the criteria a step is judged by ([`criteria`]). No
//! clock but the instants it is handed, no client, no plugin runtime: the
//! serving slot records outcomes into it and the resource's rollout
//! writes its decisions.

pub mod criteria;
pub mod plan;
pub mod tally;
