// Package controller is the Go SDK for wasm-operator controller plugins of
// any kind: WebAssembly components of the `wasm-operator:controller@0.3.0`
// world (`wit/0.3/controller.wit`), which reconcile a parent of any
// namespaced kind into the children a `PluginController` declares. It
// mirrors the Rust controller SDK (`plugins/controller-sdk`):
//
//   - [Input]: the parent (typed metadata, its `spec` and `status` as JSON,
//     or decoded with [Input.SpecInto]) and its children by kind
//     ([Input.Children], [Input.Child]);
//   - [Output] and [Desired]: the children as they should be, deletes, the
//     new status (written only when it differs), [Event]s, a requeue;
//   - [Permanent] and [Retryable]: errors (a plain error is retryable);
//   - [Log]: structured logs to the host (captured natively in tests);
//   - package controllertest: a parent with its children as the host would
//     pass them, and [Call] to run a [ReconcileFunc] natively in `go test`;
//   - package component (wasip1 only): the component's export.
//
// A plugin is a [ReconcileFunc] in a package of its own (tested natively)
// and a main package that exports it:
//
//	func init() { component.Export("hello", "0.1.0", hello.Reconcile) }
//	func main() {}
//
// `plugins/go/build.sh` with `WIT_WORLD=controller` builds the component;
// `wasm-operator new NAME --kind G/V/K --owns KINDS --lang go` scaffolds a
// project.
package controller
