// Command misbehaving-go is the Go twin of the misbehaving test plugin
// (tests/plugins/misbehaving): it reconciles exactly like the Go replicaset
// plugin unless the Jinghzhu has the annotation
// `test.jinghzhu.io/misbehave`, whose value picks a misbehaviour:
//
//	spin   loops forever (the host's deadline must stop it)
//	hog    allocates and touches memory in 1 MiB chunks forever (the
//	       host's memory cap must stop it)
//	panic  panics (the SDK recovers it, as controller-runtime does, and
//	       fails the call with a retryable error naming the panic)
//	exit   exits (`os.Exit`: the host reports a trap, the plugin's
//	       failure, not its own)
//	many   proposes 200 000 pod creates, 7 MB on the wire (the host's
//	       output limit must refuse them before they are lifted)
//
// Build: plugins/go/build.sh OUT tests/plugins/misbehaving-go
package main

import (
	"os"

	"github.com/wasm-operator/wasm-operator/plugins/go/replicaset"
	"github.com/wasm-operator/wasm-operator/plugins/go/sdk"
	"github.com/wasm-operator/wasm-operator/plugins/go/sdk/component"
)

// PluginName is the name the plugin reports.
const PluginName = "misbehaving-go"

// Annotation selects the misbehaviour.
const Annotation = "test.jinghzhu.io/misbehave"

// ManyPods is how many creates `many` proposes.
const ManyPods = 200_000

// sink keeps the spinning and hogging loops' work observable, so the
// compiler cannot drop them.
var sink uint64

func reconcile(ctx sdk.Context, in sdk.Input) (sdk.Output, error) {
	switch in.Jinghzhu.Metadata.Annotations()[Annotation] {
	case "spin":
		for {
			sink++
		}
	case "hog":
		var kept [][]byte
		for {
			chunk := make([]byte, 1<<20)
			for i := 0; i < len(chunk); i += 4096 {
				chunk[i] = byte(sink)
			}
			kept = append(kept, chunk)
			sink += uint64(len(kept))
		}
	case "panic":
		panic("misbehaving-go was asked to panic")
	case "exit":
		os.Exit(3)
	case "many":
		out, err := replicaset.Reconcile(ctx, in)
		create := sdk.FromTemplate(in.Jinghzhu)
		out.CreatePods = make([]sdk.PodCreate, ManyPods)
		for i := range out.CreatePods {
			out.CreatePods[i] = create
		}
		return out, err
	}
	return replicaset.Reconcile(ctx, in)
}

func init() {
	component.Export(PluginName, replicaset.Version, reconcile)
}

// main is never called: the component is a reactor.
func main() {}
