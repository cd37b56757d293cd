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
	"flag"
	"os"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func main() {
	var (
		workers     int
		namespace   string
		metricsAddr string
	)
	flag.IntVar(&workers, "workers", 4, "reconciles running at once (MaxConcurrentReconciles)")
	flag.StringVar(&namespace, "namespace", "", "watch only this namespace (default: all, as the host)")
	flag.StringVar(&metricsAddr, "metrics-addr", "127.0.0.1:9090", "serve Prometheus /metrics here (0 for none)")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	if err := run(workers, namespace, metricsAddr); err != nil {
		ctrl.Log.WithName("setup").Error(err, "memcached-peer stopped")
		os.Exit(1)
	}
}

// podMetadata is the type of the pods the operator watches: metadata only.
func podMetadata() *metav1.PartialObjectMetadata {
	pod := &metav1.PartialObjectMetadata{}
	pod.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	return pod
}

func run(workers int, namespace, metricsAddr string) error {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := AddToScheme(scheme); err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	// Unthrottled, like the host's kube client.
	cfg.QPS = -1
	cacheOpts := cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&appsv1.Deployment{}: {Label: labels.SelectorFromSet(labels.Set{managedByLabel: managedBy})},
			podMetadata():        {Label: labels.SelectorFromSet(labels.Set{nameLabel: appName})},
		},
	}
	if namespace != "" {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{namespace: {}}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:         scheme,
		Cache:          cacheOpts,
		Metrics:        metricsserver.Options{BindAddress: metricsAddr},
		LeaderElection: false,
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
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
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
func indexByController(obj client.Object) []string {
	for _, ref := range obj.GetOwnerReferences() {
		if ref.Controller != nil && *ref.Controller &&
			ref.APIVersion == GroupVersion.String() && ref.Kind == "Memcached" {
			return []string{ref.Name}
		}
	}
	return nil
}
