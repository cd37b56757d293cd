package plugin

import (
	"encoding/json"
	"strings"
	"testing"

	"{{module}}/controller"
	"{{module}}/controller/controllertest"
)

// parent is a parent named `sample` with every child kind declared and no child.
func parent() *controllertest.Fixture {
	f := controllertest.Parent(Parent[0], Parent[1], "sample").Spec(map[string]any{"replicas": 2})
	for _, kind := range Owns {
		f = f.Declare(kind[0], kind[1])
	}
	return f
}

// withEveryChild is the same parent with one child of each kind.
func withEveryChild() *controllertest.Fixture {
	f := parent()
	for _, kind := range Owns {
		f = f.Child(controllertest.Object(kind[0], kind[1], "sample", map[string]any{}))
	}
	return f
}

func TestCreatesOneChildPerOwnedKind(t *testing.T) {
	out, err := controllertest.Reconcile(Reconcile, parent())
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range Owns {
		var found []*controller.Desired
		for _, c := range out.Applied(kind[1]) {
			if c.APIVersion == kind[0] {
				found = append(found, c)
			}
		}
		if len(found) != 1 || found[0].Name != "sample" {
			t.Fatalf("%s: %+v", kind[1], found)
		}
	}
	if out.Status["phase"] != "Creating" || out.Status["observedGeneration"] != int64(1) {
		t.Fatalf("status %v", out.Status)
	}
}

func TestIsReadyOnceEveryChildExistsAndThenWritesNoStatus(t *testing.T) {
	fixture := withEveryChild()
	out, err := controllertest.Reconcile(Reconcile, fixture)
	if err != nil {
		t.Fatal(err)
	}
	if out.Status["phase"] != "Ready" {
		t.Fatalf("status %v", out.Status)
	}
	again, err := controllertest.Reconcile(Reconcile, fixture.Status(out.Status))
	if err != nil {
		t.Fatal(err)
	}
	if again.Status != nil {
		t.Fatalf("an unchanged status is written: %v", again.Status)
	}
	if len(again.Children) != len(Owns) {
		t.Fatalf("the children are still proposed: %d", len(again.Children))
	}
}

func TestAParentBeingDeletedGetsNothing(t *testing.T) {
	out, err := controllertest.Reconcile(Reconcile, parent().Deleting())
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Children) != 0 || out.Status != nil {
		t.Fatalf("%+v", out)
	}
}

func TestASpecOfTheWrongTypeIsAPermanentError(t *testing.T) {
	_, err := controller.Call(Reconcile, parent().Spec(map[string]any{"replicas": "two"}).Input())
	if err == nil || err.Retryable || !strings.Contains(err.Message, "invalid spec") {
		t.Fatalf("%+v", err)
	}
}

func TestTheOutputIsValidOnTheWire(t *testing.T) {
	wire, err := controller.Call(Reconcile, parent().Input())
	if err != nil {
		t.Fatal(err.Message)
	}
	if len(wire.Apply) != len(Owns) || !wire.StatusJson.IsSome() {
		t.Fatalf("%+v", wire)
	}
	for _, c := range wire.Apply {
		var body map[string]any
		if err := json.Unmarshal([]byte(c.BodyJson), &body); err != nil {
			t.Fatalf("%s: %v", c.Kind, err)
		}
	}
}
