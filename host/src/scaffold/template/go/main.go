// Command plugin is {{name}} as a WebAssembly component (./build.sh makes
// it one): the logic of package plugin behind the
// `jinghzhu:operator/reconciler@0.2.0` export.
package main

import (
	"{{module}}/plugin"
	"{{module}}/sdk/component"
)

func init() {
	component.Export(plugin.PluginName, plugin.Version, plugin.Reconcile)
}

// main is never called: the component is a reactor, the host calls its export.
func main() {}
