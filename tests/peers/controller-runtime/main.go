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
	"flag"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

func main() {
	var (
		workers     int
		namespace   string
		metricsAddr string
	)
	flag.IntVar(&workers, "workers", 4, "reconciles running at once (MaxConcurrentReconciles)")
	flag.StringVar(&namespace, "namespace", "", "watch only this namespace (default: all)")
	flag.StringVar(&metricsAddr, "metrics-addr", "127.0.0.1:9090", "serve Prometheus /metrics here")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	setupLog := ctrl.Log.WithName("setup")

	if err := run(workers, namespace, metricsAddr); err != nil {
		setupLog.Error(err, "controller-runtime-peer stopped")
		os.Exit(1)
	}
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
	// Unthrottled, like the host's kube client: a negative QPS disables
	// client-go's token bucket.
	cfg.QPS = -1

	cacheOpts := cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}: {Label: labels.SelectorFromSet(labels.Set{managedByLabel: managedBy})},
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
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Complete(reconciler)
	if err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// indexByController indexes a pod by the name of its Jinghzhu controller.
func indexByController(obj client.Object) []string {
	for _, ref := range obj.GetOwnerReferences() {
		if ref.Controller != nil && *ref.Controller &&
			ref.APIVersion == GroupVersion.String() && ref.Kind == "Jinghzhu" {
			return []string{ref.Name}
		}
	}
	return nil
}
