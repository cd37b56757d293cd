// Package sdk is the Go SDK for wasm-operator reconcile plugins (contract
// jinghzhu:operator@0.2.0, wit/0.2/operator.wit).
//
// A plugin is a ReconcileFunc: it reads friendly views of the host's input
// (Decode: Input, Jinghzhu, Pod, ObjectMeta) and returns an Output (Pods to
// create and delete, a new status, Events), or an error. Call runs one
// reconcile on the wire records; the wasm-only package sdk/component turns
// a ReconcileFunc into the component's export.
//
// The views decode strings lazily and without copying: a string a view
// returns shares its bytes with the raw input's string table, so the raw
// input must not be modified while the views are in use.
//
// The helpers (IsLive, CountReady, FromTemplate, BuildStatus, PatchFor,
// ParseRFC3339...) are the Rust, Python and JavaScript SDKs' helpers, with
// the same semantics. Strings compare bytewise, which is Unicode code point
// order, as in Rust and Python.
package sdk
