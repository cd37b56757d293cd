//go:build wasip1

// Package component turns a controller's reconcile function into the
// WebAssembly component's export (`wasm-operator:controller/reconciler@0.3.0`)
// and sends the SDK's log lines to the host's `log` import. A plugin's main
// package calls Export from its init and has an empty main:
//
//	func init() { component.Export("hello", "0.1.0", hello.Reconcile) }
//	func main() {}
//
// Built for wasip1 only (`plugins/go/build.sh` with WIT_WORLD=controller);
// the SDK and the plugin's logic test natively without it.
package component

import (
	"runtime/debug"

	"github.com/wasm-operator/wasm-operator/plugins/go/controller"
	"github.com/wasm-operator/wasm-operator/plugins/go/controller/bindings/exports/export_wasm_operator_controller_reconciler"
	// The generated exports: linking them in is what makes the component
	// export `reconcile` and `info`.
	_ "github.com/wasm-operator/wasm-operator/plugins/go/controller/bindings/exports/wit_exports"
	hostlog "github.com/wasm-operator/wasm-operator/plugins/go/controller/bindings/imports/wasm_operator_controller_log"
	wit "github.com/wasm-operator/wasm-operator/plugins/go/controller/bindings/imports/wasm_operator_controller_types"
)

// Export registers f as the component's reconcile under name and version,
// and the host's log import as the SDK's log sink.
func Export(name, version string, f controller.ReconcileFunc) {
	controller.SetLogSink(sendToHost)
	export_wasm_operator_controller_reconciler.Register(&export_wasm_operator_controller_reconciler.Handler{
		Name:    name,
		Version: version,
		Reconcile: func(raw wit.ReconcileInput) (wit.ReconcileOutput, *wit.ReconcileError) {
			return controller.Call(f, raw)
		},
	})
}

func sendToHost(level controller.Level, message string, fields []controller.Field) {
	out := make([]hostlog.Field, len(fields))
	for i, f := range fields {
		out[i] = hostlog.Field{Key: f.Key, Value: f.Value}
	}
	hostlog.Log(hostlog.Level(level), message, out)
}

// The garbage collector is off in a plugin's instance, for the reason the
// 0.2 SDK's component package gives (`plugins/go/sdk/component`): Go's
// allocator may finish a collection inside `cabi_realloc` while the host
// copies the input in, and that reads the clock, an import the component
// model forbids there. The host gives every reconcile a fresh instance
// with a memory cap, so an instance never lives long enough to need one.
func init() {
	debug.SetGCPercent(-1)
}
