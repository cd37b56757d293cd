package plugin

import (
	"testing"

	"{{module}}/sdk"
	"{{module}}/sdk/sdktest"
)

// A Jinghzhu asking for 3 pods with one running gets 2 creates and a
// status saying so.
func TestScalesUpFromTheTemplate(t *testing.T) {
	jz := sdktest.Jinghzhu("web", "default", 3)
	in := sdktest.NewInput(jz).Pod(sdktest.Pod("web-a", sdk.PhaseRunning)).View()
	out, err := Reconcile(sdk.Context{Now: in.Now}, in)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.CreatePods) != 2 {
		t.Fatalf("%d creates, want 2", len(out.CreatePods))
	}
	if out.Status == nil || out.Status.Current != 1 || out.Status.State != sdk.StateScaling {
		t.Fatalf("status %+v, want current 1 and %s", out.Status, sdk.StateScaling)
	}
}
