// controller-runtime-peer: the Jinghzhu operator written the kubebuilder way
// with the latest controller-runtime, as the Go reference the scale benchmark
// (tests/scale-bench) measures the Wasm host against. Same Jinghzhu API and
// status, same pods, Events and annotation as `wasm-operator run` with the
// replicaset plugin; same knobs: --workers, --namespace, --metrics-addr.
//
// The client is unthrottled (QPS -1) and leader election is off, as for the
// host. The caches hold only what the host's caches hold: Jinghzhus, and pods
// labelled app.kubernetes.io/managed-by=wasm-operator, managedFields stripped.
package main

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	"github.com/wasm-operator/wasm-operator/tests/peers/controller-runtime/internal/peer"
)

func main() { peer.Main("controller-runtime-peer", run) }

// indexByController indexes a pod by the name of its Jinghzhu controller.
var indexByController = peer.ControllerIndex(GroupVersion, "Jinghzhu")

func run(f peer.Flags) error {
	mgr, err := peer.NewManager(f, AddToScheme, map[client.Object]cache.ByObject{
		&corev1.Pod{}: {Label: labels.SelectorFromSet(labels.Set{managedByLabel: managedBy})},
	})
	if err != nil {
		return err
	}
	ctx := ctrl.SetupSignalHandler()
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, ownerIndex, indexByController); err != nil {
		return err
	}
	reconciler := &JinghzhuReconciler{
		Client:   mgr.GetClient(),
		Scheme:   mgr.GetScheme(),
		Recorder: mgr.GetEventRecorder("controller-runtime-peer"),
	}
	err = ctrl.NewControllerManagedBy(mgr).
		For(&Jinghzhu{}).
		Owns(&corev1.Pod{}).
		Named("jinghzhu").
		WithOptions(controller.Options{MaxConcurrentReconciles: f.Workers}).
		Complete(reconciler)
	if err != nil {
		return err
	}
	return mgr.Start(ctx)
}
