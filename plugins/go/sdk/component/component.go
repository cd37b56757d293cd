//go:build wasip1

// Package component turns a reconcile function into the WebAssembly
// component's export (`jinghzhu:operator/reconciler@0.2.0`) and sends the
// SDK's log lines to the host's `log` import. A plugin's main package calls
// Export from its init and has an empty main:
//
//	func init() { component.Export(replicaset.PluginName, replicaset.Version, replicaset.Reconcile) }
//	func main() {}
//
// Built for wasip1 only (`build.sh`); the SDK and the plugin's logic test
// natively without it.
package component

import (
	"runtime/debug"

	"github.com/wasm-operator/wasm-operator/plugins/go/bindings/exports/export_jinghzhu_operator_reconciler"
	// The generated exports: linking them in is what makes the component
	// export `reconcile` and `info`.
	_ "github.com/wasm-operator/wasm-operator/plugins/go/bindings/exports/wit_exports"
	hostlog "github.com/wasm-operator/wasm-operator/plugins/go/bindings/imports/jinghzhu_operator_log"
	wit "github.com/wasm-operator/wasm-operator/plugins/go/bindings/imports/jinghzhu_operator_types"
	"github.com/wasm-operator/wasm-operator/plugins/go/sdk"
)

// Export registers f as the component's reconcile under name and version,
// and the host's log import as the SDK's log sink.
func Export(name, version string, f sdk.ReconcileFunc) {
	sdk.SetLogSink(sendToHost)
	export_jinghzhu_operator_reconciler.Register(&export_jinghzhu_operator_reconciler.Handler{
		Name:    name,
		Version: version,
		Reconcile: func(raw wit.ReconcileInput) (wit.ReconcileOutput, *wit.ReconcileError) {
			return sdk.Call(f, &raw)
		},
	})
}

func sendToHost(level sdk.Level, message string, fields []sdk.Field) {
	out := make([]hostlog.Field, len(fields))
	for i, f := range fields {
		out[i] = hostlog.Field{Key: f.Key, Value: f.Value}
	}
	hostlog.Log(hostlog.Level(level), message, out)
}

// The garbage collector is off in a plugin's instance.
//
// The host copies a call's input into the guest through `cabi_realloc`,
// and the component model forbids calling an import while it runs. Go's
// allocator may start a collection inside that allocation and finish it in
// a later one; finishing reads the wall clock (`clock_time_get` on the
// realtime clock, which the adapter's `adapter_monotonic_clock_set_paused`
// does not cover), an import: the call traps with "cannot leave component
// instance". The languages test reproduces it with the collector on (build
// tag `jinghzhu_gc`) and a 60 000-pod input (from between 30 000 and
// 40 000 pods on). The host gives every reconcile a fresh instance and
// caps its memory (64 MiB by default), so an instance never lives long
// enough to need a collection: a 100-pod reconcile allocates well under
// 1 MiB, and the 60 000-pod input runs within the default cap.
func init() {
	if collectorOn {
		return
	}
	debug.SetGCPercent(-1)
}
