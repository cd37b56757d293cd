package plugin

import (
	"testing"

	"{{module}}/sdk/fixtures"
)

// Every golden case of fixtures/ passes, and the plugin is idempotent on
// each: the test fails when no case ran.
func TestFixtures(t *testing.T) {
	failures, err := fixtures.RunAll("../fixtures", Reconcile, "../wit/default-pod-spec.json")
	if err != nil {
		t.Fatal(err)
	}
	dirs, err := fixtures.CaseDirs("../fixtures")
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) == 0 {
		t.Fatal("no fixture case in ../fixtures")
	}
	for name, failure := range failures {
		t.Errorf("%s: %s", name, failure)
	}
}
