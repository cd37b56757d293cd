// Command replicaset is the Go replicaset plugin as a WebAssembly component
// (`build.sh` makes it one): the logic of package replicaset behind the
// `jinghzhu:operator/reconciler@0.2.0` export.
package main

import (
	"github.com/wasm-operator/wasm-operator/plugins/go/replicaset"
	"github.com/wasm-operator/wasm-operator/plugins/go/sdk/component"
)

func init() {
	component.Export(replicaset.PluginName, replicaset.Version, replicaset.Reconcile)
}

// main is never called: the component is a reactor, the host calls its export.
func main() {}
