//! Tests of the pod policy.
