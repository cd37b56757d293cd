// memcached-peer: the Memcached operator of the Operator SDK tutorial
// written the kubebuilder way with the latest controller-runtime, doing what
// `wasm-operator run --plugin-controllers` does with examples/memcached
// (plugin and controller.yaml): the Go reference the Memcached benchmark
// (tests/scale-bench, `memcached-bench`) measures the Wasm host against.
// Same knobs as the host: --workers, --metrics-addr.
//
// The client is unthrottled (QPS -1) and leader election is off, as for the
// host. Like the host's caches, its caches hold Memcacheds, this operator's
// Deployments (by label) and pods as metadata only, managedFields stripped;
// a pod's change wakes the Memcached named by its instance label.
package main

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/wasm-operator/wasm-operator/tests/peers/controller-runtime/internal/peer"
)

func main() { peer.Main("memcached-peer", run) }

// podMetadata is the type of the pods the operator watches: metadata only.
func podMetadata() *metav1.PartialObjectMetadata {
	pod := &metav1.PartialObjectMetadata{}
	pod.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	return pod
}

func run(f peer.Flags) error {
	mgr, err := peer.NewManager(f, AddToScheme, map[client.Object]cache.ByObject{
		&appsv1.Deployment{}: {Label: labels.SelectorFromSet(labels.Set{managedByLabel: managedBy})},
		podMetadata():        {Label: labels.SelectorFromSet(labels.Set{nameLabel: appName})},
	})
	if err != nil {
		return err
	}
	ctx := ctrl.SetupSignalHandler()
	if err := mgr.GetFieldIndexer().IndexField(ctx, &appsv1.Deployment{}, ownerIndex, indexByController); err != nil {
		return err
	}
	reconciler := &MemcachedReconciler{
		Client:   mgr.GetClient(),
		Recorder: mgr.GetEventRecorder("memcached-peer"),
	}
	err = ctrl.NewControllerManagedBy(mgr).
		For(&Memcached{}).
		Owns(&appsv1.Deployment{}).
		Watches(podMetadata(), handler.EnqueueRequestsFromMapFunc(memcachedOfPod), builder.OnlyMetadata).
		Named("memcached").
		WithOptions(controller.Options{MaxConcurrentReconciles: f.Workers}).
		Complete(reconciler)
	if err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// memcachedOfPod wakes the Memcached a pod belongs to (its instance label).
func memcachedOfPod(_ context.Context, pod client.Object) []reconcile.Request {
	instance := pod.GetLabels()[instanceLabel]
	if instance == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: pod.GetNamespace(), Name: instance}}}
}

// indexByController indexes a Deployment by the name of its Memcached controller.
var indexByController = peer.ControllerIndex(GroupVersion, "Memcached")
