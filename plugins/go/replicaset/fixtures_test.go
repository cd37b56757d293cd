package replicaset_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/wasm-operator/wasm-operator/plugins/go/replicaset"
	"github.com/wasm-operator/wasm-operator/plugins/go/sdk/fixtures"
)

const (
	fixturesDir     = "../../replicaset/fixtures"
	defaultSpecPath = "../../../wit/default-pod-spec.json"
)

// TestFixtures runs every golden case the Rust and JavaScript plugins pass.
func TestFixtures(t *testing.T) {
	dirs, err := fixtures.CaseDirs(fixturesDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 10 {
		t.Fatalf("only %d fixture cases in %s; expected at least 10", len(dirs), fixturesDir)
	}
	failures, err := fixtures.RunAll(fixturesDir, replicaset.Reconcile, defaultSpecPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range slices.Sorted(maps.Keys(failures)) {
		t.Errorf("case %s: %s", name, failures[name])
	}
	t.Logf("%d cases, %d failed", len(dirs), len(failures))
}
