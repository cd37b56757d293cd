// Command plugin is {{name}} as a WebAssembly component (./build.sh makes
// it one): the logic of package plugin behind the
// `wasm-operator:controller/reconciler@0.3.0` export.
package main

import (
	"{{module}}/controller/component"
	"{{module}}/plugin"
)

func init() {
	component.Export(plugin.Name, plugin.Version, plugin.Reconcile)
}

// main is never called: the component is a reactor, the host calls its export.
func main() {}
