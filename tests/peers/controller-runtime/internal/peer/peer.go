// Package peer is the set-up both controller-runtime peers share (the
// Jinghzhu peer in this module's root, the Memcached peer in
// cmd/memcached): the host's knobs as flags, the logger, and a manager
// configured as the host runs (an unthrottled client, no leader election,
// caches holding only what the host's caches hold, managedFields
// stripped).
package peer

import (
	"flag"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Flags are the host's knobs a peer takes.
type Flags struct {
	// Workers is how many reconciles run at once (MaxConcurrentReconciles).
	Workers int
	// Namespace is the only namespace watched; empty for all.
	Namespace string
	// MetricsAddr is where Prometheus /metrics is served ("0" for nowhere).
	MetricsAddr string
}

// Main parses the flags, sets up the logger and runs run; a failure is
// logged as "NAME stopped" and exits 1.
func Main(name string, run func(Flags) error) {
	var f Flags
	flag.IntVar(&f.Workers, "workers", 4, "reconciles running at once (MaxConcurrentReconciles)")
	flag.StringVar(&f.Namespace, "namespace", "", "watch only this namespace (default: all, as the host)")
	flag.StringVar(&f.MetricsAddr, "metrics-addr", "127.0.0.1:9090", "serve Prometheus /metrics here (0 for none)")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	if err := run(f); err != nil {
		ctrl.Log.WithName("setup").Error(err, name+" stopped")
		os.Exit(1)
	}
}

// NewManager is a manager for the types of client-go and addToScheme
// whose caches hold byObject's objects by their selectors (in
// f.Namespace when set) with managedFields stripped, its client
// unthrottled, leader election off and metrics at f.MetricsAddr.
func NewManager(f Flags, addToScheme func(*runtime.Scheme) error, byObject map[client.Object]cache.ByObject) (ctrl.Manager, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := addToScheme(scheme); err != nil {
		return nil, err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, err
	}
	// Unthrottled, like the host's kube client: a negative QPS disables
	// client-go's token bucket.
	cfg.QPS = -1
	cacheOpts := cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject:         byObject,
	}
	if f.Namespace != "" {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{f.Namespace: {}}
	}
	return ctrl.NewManager(cfg, ctrl.Options{
		Scheme:         scheme,
		Cache:          cacheOpts,
		Metrics:        metricsserver.Options{BindAddress: f.MetricsAddr},
		LeaderElection: false,
	})
}

// ControllerIndex indexes an object by the name of its controller, an
// object of kind in groupVersion.
func ControllerIndex(groupVersion schema.GroupVersion, kind string) client.IndexerFunc {
	apiVersion := groupVersion.String()
	return func(obj client.Object) []string {
		for _, ref := range obj.GetOwnerReferences() {
			if ref.Controller != nil && *ref.Controller && ref.APIVersion == apiVersion && ref.Kind == kind {
				return []string{ref.Name}
			}
		}
		return nil
	}
}
