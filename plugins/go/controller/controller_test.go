package controller_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/wasm-operator/wasm-operator/plugins/go/controller"
	"github.com/wasm-operator/wasm-operator/plugins/go/controller/controllertest"
)

type spec struct {
	Replicas int    `json:"replicas"`
	Image    string `json:"image"`
}

// hello makes one ConfigMap and one Deployment per parent, and a status.
func hello(in *controller.Input) (*controller.Output, error) {
	s := spec{Replicas: 1, Image: "pause"}
	if err := in.SpecInto(&s); err != nil {
		return nil, err
	}
	out := controller.NewOutput()
	if in.IsDeleting() {
		return out, nil
	}
	out.Apply(controller.NewDesired("v1", "ConfigMap", in.Name()).
		WithLabel("app", in.Name()).
		WithBody(map[string]any{"data": map[string]any{"image": s.Image}}))
	out.Apply(controller.NewDesired("apps/v1", "Deployment", in.Name()).
		WithBody(map[string]any{"spec": map[string]any{"replicas": s.Replicas}}))
	ready := 0
	if d, ok := in.Child("apps/v1/Deployment", in.Name()); ok {
		if n, ok := d.Field("/status/readyReplicas"); ok {
			if v, err := n.(json.Number).Int64(); err == nil {
				ready = int(v)
			}
		}
	}
	out.SetStatus(in, map[string]any{"observedGeneration": in.Generation(), "readyReplicas": ready})
	if ready < s.Replicas {
		out.Requeue(1500 * time.Millisecond)
		out.Record(controller.Normal("Scaling", "waiting for pods"))
	}
	return out, nil
}

func parent() *controllertest.Fixture {
	return controllertest.Parent("example.com/v1", "WebApp", "web").
		Spec(map[string]any{"replicas": 2}).
		Declare("v1", "ConfigMap").
		Declare("apps/v1", "Deployment")
}

func TestDesiredChildrenStatusEventsAndRequeueReachTheWire(t *testing.T) {
	out, err := controllertest.Reconcile(hello, parent())
	if err != nil {
		t.Fatal(err)
	}
	wire, err := out.ToWire()
	if err != nil {
		t.Fatal(err)
	}
	if len(wire.Apply) != 2 || wire.Apply[0].Kind != "ConfigMap" || wire.Apply[1].Kind != "Deployment" {
		t.Fatalf("apply %+v", wire.Apply)
	}
	if wire.Apply[0].BodyJson != `{"data":{"image":"pause"}}` {
		t.Fatalf("body %s", wire.Apply[0].BodyJson)
	}
	if len(wire.Apply[0].Labels) != 1 || wire.Apply[0].Labels[0].Key != "app" {
		t.Fatalf("labels %+v", wire.Apply[0].Labels)
	}
	if got := wire.StatusJson.Some(); got != `{"observedGeneration":1,"readyReplicas":0}` {
		t.Fatalf("status %s", got)
	}
	if wire.RequeueAfterMs.Some() != 1500 {
		t.Fatalf("requeue %d", wire.RequeueAfterMs.Some())
	}
	if len(wire.Events) != 1 || wire.Events[0].Reason != "Scaling" {
		t.Fatalf("events %+v", wire.Events)
	}
	if v, ok := out.Applied("Deployment")[0].Field("/spec/replicas"); !ok || v != json.Number("2") {
		t.Fatalf("replicas %v", v)
	}
}

func TestChildrenAreReadByKindAndAnUnchangedStatusIsNotWritten(t *testing.T) {
	deployment := controllertest.Object("apps/v1", "Deployment", "web",
		map[string]any{"status": map[string]any{"readyReplicas": 2}})
	fixture := parent().Child(deployment).
		Status(map[string]any{"observedGeneration": 1, "readyReplicas": 2})
	in := fixture.View()
	if len(in.Children("Deployment")) != 1 || len(in.Children("v1/Deployment")) != 0 {
		t.Fatal("children by kind")
	}
	if !in.Declares("ConfigMap") || in.Declares("Secret") {
		t.Fatal("declares")
	}
	out, err := controllertest.Reconcile(hello, fixture)
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != nil || out.RequeueAfter != 0 || len(out.Events) != 0 {
		t.Fatalf("status %v requeue %v events %v", out.Status, out.RequeueAfter, out.Events)
	}
	wire, _ := out.ToWire()
	if wire.StatusJson.IsSome() || wire.RequeueAfterMs.IsSome() {
		t.Fatal("no status, no requeue on the wire")
	}
}

func TestABadSpecIsPermanentAndAPlainErrorRetryable(t *testing.T) {
	raw := parent().Spec(map[string]any{"replicas": "two"}).Input()
	_, err := controller.Call(hello, raw)
	if err == nil || err.Retryable || !strings.Contains(err.Message, "invalid spec") {
		t.Fatalf("%+v", err)
	}
	failing := func(*controller.Input) (*controller.Output, error) { return nil, errors.New("api busy") }
	_, err = controller.Call(failing, raw)
	if err == nil || !err.Retryable || err.Message != "api busy" {
		t.Fatalf("%+v", err)
	}
	panicking := func(*controller.Input) (*controller.Output, error) { panic("boom") }
	_, err = controller.Call(panicking, raw)
	if err == nil || err.Retryable || !strings.Contains(err.Message, "boom") {
		t.Fatalf("%+v", err)
	}
}

func TestADeletingParentGetsNothingAndABadBodyIsRefused(t *testing.T) {
	wire, err := controller.Call(hello, parent().Deleting().Input())
	if err != nil || len(wire.Apply) != 0 || wire.StatusJson.IsSome() {
		t.Fatalf("%+v %+v", wire, err)
	}
	raw := parent().Input()
	raw.Parent.BodyJson = "[1]"
	if _, err := controller.Call(hello, raw); err == nil || err.Retryable {
		t.Fatalf("%+v", err)
	}
	if _, err := controller.NewInput(raw); err == nil {
		t.Fatal("an array body")
	}
}

func TestLogsAreCapturedNatively(t *testing.T) {
	controller.TakeCaptured()
	controller.Call(hello, parent().Input())
	logs := controller.TakeCaptured()
	if len(logs) != 1 || logs[0].Message != "reconciled" || logs[0].Fields[0].Value != "web" {
		t.Fatalf("%+v", logs)
	}
}

func TestPointers(t *testing.T) {
	body := map[string]any{"a/b": []any{map[string]any{"c": 1}}}
	if v, ok := controller.Pointer(body, "/a~1b/0/c"); !ok || v != 1 {
		t.Fatalf("%v %v", v, ok)
	}
	for _, bad := range []string{"/x", "/a~1b/1", "/a~1b/-1/c", "x"} {
		if _, ok := controller.Pointer(body, bad); ok {
			t.Fatal(bad)
		}
	}
}
