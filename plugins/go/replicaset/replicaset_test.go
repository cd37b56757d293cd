package replicaset_test

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/wasm-operator/wasm-operator/plugins/go/replicaset"
	"github.com/wasm-operator/wasm-operator/plugins/go/sdk"
	"github.com/wasm-operator/wasm-operator/plugins/go/sdk/sdktest"
)

func reconcile(t *testing.T, in sdk.Input) sdk.Output {
	t.Helper()
	out, err := replicaset.Reconcile(sdk.Context{Now: in.Now, Log: sdk.Log}, in)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestScalesUpFromTheTemplateWithoutAnEventOfItsOwn(t *testing.T) {
	jz := sdktest.Jinghzhu("web", "shop", 3).WithTemplate(sdk.Template{
		Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"n": "x"}, SpecJSON: `{"containers":[]}`,
	})
	sdk.TakeCaptured()
	out := reconcile(t, sdktest.NewInput(jz).Pod(sdktest.Pod("web-a", sdk.PhaseRunning)).View())
	want := sdk.PodCreate{
		GenerateName: "web-", Labels: map[string]string{"app": "web"},
		Annotations: map[string]string{"n": "x"}, SpecJSON: `{"containers":[]}`,
	}
	if len(out.CreatePods) != 2 || !reflect.DeepEqual(out.CreatePods[0], want) {
		t.Fatalf("creates = %+v", out.CreatePods)
	}
	// The host's SuccessfulCreate names the pods: the plugin adds no Event.
	if len(out.Events) != 0 {
		t.Errorf("events = %+v", out.Events)
	}
	if out.Status.Message != "1/3 pods, 1/3 ready; creating 2" || out.Status.State != sdk.StateScaling {
		t.Errorf("status = %+v", out.Status)
	}
	logged := sdk.TakeCaptured()
	if len(logged) != 1 || logged[0].Message != "scaling up" || logged[0].Level != sdk.LevelDebug ||
		logged[0].Fields[3] != (sdk.Field{Key: "creating", Value: "2"}) {
		t.Errorf("logged = %+v", logged)
	}
}

func TestScalesDownNotReadyAndNewestFirst(t *testing.T) {
	in := sdktest.NewInput(sdktest.Jinghzhu("web", "default", 1)).Pods(
		sdktest.Pod("old-ready", sdk.PhaseRunning).CreatedAt(100),
		sdktest.Pod("new-ready", sdk.PhaseRunning).CreatedAt(200),
		sdktest.Pod("not-ready", sdk.PhaseRunning).Ready(false).CreatedAt(50),
		sdktest.Pod("pending-no-time", sdk.PhasePending).NoCreationTimestamp(),
	).View()
	sdk.TakeCaptured()
	out := reconcile(t, in)
	want := []string{"pending-no-time", "not-ready", "new-ready"}
	if !reflect.DeepEqual(out.DeletePods, want) {
		t.Errorf("deletes = %v, want %v", out.DeletePods, want)
	}
	// The host's SuccessfulDelete names the pods: the plugin adds no Event.
	if len(out.Events) != 0 {
		t.Errorf("events = %+v", out.Events)
	}
	logged := sdk.TakeCaptured()
	if len(logged) != 1 || logged[0].Message != "scaling down" || logged[0].Level != sdk.LevelDebug ||
		logged[0].Fields[3] != (sdk.Field{Key: "deleting", Value: "pending-no-time,not-ready,new-ready"}) {
		t.Errorf("logged = %+v", logged)
	}
	if out.Status.Message != "4/1 pods, 2/1 ready; deleting 3" {
		t.Errorf("status = %q", out.Status.Message)
	}
}

func TestTerminatingAndFinishedPodsAreReplacedNotDeleted(t *testing.T) {
	in := sdktest.NewInput(sdktest.Jinghzhu("web", "default", 2)).Pods(
		sdktest.Pod("web-a", sdk.PhaseRunning),
		sdktest.Pod("web-b", sdk.PhaseRunning).Terminating(),
		sdktest.Pod("web-c", sdk.PhaseFailed),
		sdktest.Pod("web-d", sdk.PhaseSucceeded),
	).View()
	out := reconcile(t, in)
	if len(out.DeletePods) != 0 || len(out.CreatePods) != 1 {
		t.Fatalf("deletes = %v, creates = %d", out.DeletePods, len(out.CreatePods))
	}
	if !reflect.DeepEqual(out.Status.PodList, []string{"web-a"}) || out.Status.Current != 1 {
		t.Errorf("status = %+v", out.Status)
	}
}

func TestOwnerDeletionStopsScalingAndUncontrolledPodsAreIgnored(t *testing.T) {
	in := sdktest.NewInput(sdktest.Jinghzhu("web", "default", 1).DeletingAt(5)).Pods(
		sdktest.Pod("x", sdk.PhaseRunning).Unowned(),
		sdktest.Pod("y", sdk.PhaseRunning).OwnedBy(sdktest.Jinghzhu("other", "default", 1)),
	).View()
	out := reconcile(t, in)
	if len(out.CreatePods) != 0 || len(out.Events) != 0 || len(out.DeletePods) != 0 {
		t.Fatalf("out = %+v", out)
	}
	if out.Status.Message != "0/1 pods, 0/1 ready; Jinghzhu is being deleted" {
		t.Errorf("status = %q", out.Status.Message)
	}
}

func TestStatusIsWrittenOnlyWhenChanged(t *testing.T) {
	jz := sdktest.Jinghzhu("web", "default", 1)
	first := reconcile(t, sdktest.NewInput(jz).Pod(sdktest.Pod("web-a", sdk.PhaseRunning)).View())
	if first.Status == nil || first.Status.State != sdk.StateRunning || *first.Status.ObservedGeneration != 1 {
		t.Fatalf("first status = %+v", first.Status)
	}
	second := reconcile(t, sdktest.NewInput(jz.WithStatus(*first.Status)).Pod(sdktest.Pod("web-a", sdk.PhaseRunning)).View())
	if !second.IsEmpty() {
		t.Errorf("second = %+v", second)
	}
	third := reconcile(t, sdktest.NewInput(jz.Generation(2)).Pod(sdktest.Pod("web-a", sdk.PhaseRunning)).View())
	if third.Status == nil || *third.Status.ObservedGeneration != 2 {
		t.Errorf("a new generation rewrites the status: %+v", third.Status)
	}
}

func TestUntrackedGenerationHasNoObservedGeneration(t *testing.T) {
	out := reconcile(t, sdktest.NewInput(sdktest.Jinghzhu("web", "default", 0).Generation(0)).View())
	if out.Status == nil || out.Status.ObservedGeneration != nil || out.Status.State != sdk.StateRunning {
		t.Errorf("status = %+v", out.Status)
	}
}

func TestBurstLimit(t *testing.T) {
	out := reconcile(t, sdktest.NewInput(sdktest.Jinghzhu("big", "default", 1200)).View())
	if len(out.CreatePods) != replicaset.BurstReplicas {
		t.Errorf("creates = %d, want %d", len(out.CreatePods), replicaset.BurstReplicas)
	}
	if out.Status.Message != "0/1200 pods, 0/1200 ready; creating 500" {
		t.Errorf("status = %q", out.Status.Message)
	}
	b := sdktest.NewInput(sdktest.Jinghzhu("big", "default", 0))
	for i := range 600 {
		b.Pod(sdktest.Pod(fmt.Sprintf("big-%03d", i), sdk.PhaseRunning))
	}
	out = reconcile(t, b.View())
	if len(out.DeletePods) != replicaset.BurstReplicas {
		t.Errorf("deletes = %d, want %d", len(out.DeletePods), replicaset.BurstReplicas)
	}
}

func TestCompareDeletionPriorityBreaksTiesByName(t *testing.T) {
	in := sdktest.NewInput(sdktest.Jinghzhu("w", "d", 0)).Pods(
		sdktest.Pod("w-b", sdk.PhaseRunning), sdktest.Pod("w-a", sdk.PhaseRunning),
		sdktest.Pod("w-u", sdk.PhaseUnknown), sdktest.Pod("w-s", sdk.PhaseSucceeded),
	).View()
	got := replicaset.Pick(in.Pods, 3)
	names := []string{got[0].Name(), got[1].Name(), got[2].Name()}
	if !reflect.DeepEqual(names, []string{"w-u", "w-a", "w-b"}) {
		t.Errorf("picked %v", names)
	}
	if len(replicaset.Pick(in.Pods, 10)) != 4 {
		t.Error("Pick returns at most the candidates")
	}
}

func TestStatusMessage(t *testing.T) {
	cases := map[string]string{
		replicaset.StatusMessage(2, 1, 2, replicaset.ActivitySteady, 0):   "2/2 pods, 1/2 ready",
		replicaset.StatusMessage(0, 0, 3, replicaset.ActivityCreating, 3): "0/3 pods, 0/3 ready; creating 3",
		replicaset.StatusMessage(3, 3, 1, replicaset.ActivityDeleting, 2): "3/1 pods, 3/1 ready; deleting 2",
	}
	for got, want := range cases {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}

func TestPickFollowsActivePodsOrder(t *testing.T) {
	in := sdktest.NewInput(sdktest.Jinghzhu("w", "d", 0)).Pods(
		sdktest.Pod("old-ready", sdk.PhaseRunning).CreatedAt(100),
		sdktest.Pod("new-ready", sdk.PhaseRunning).CreatedAt(200),
		sdktest.Pod("running-not-ready", sdk.PhaseRunning).Ready(false).CreatedAt(50),
		sdktest.Pod("unknown", sdk.PhaseUnknown).CreatedAt(10),
		sdktest.Pod("pending-old", sdk.PhasePending).CreatedAt(10),
		sdktest.Pod("pending-new", sdk.PhasePending).CreatedAt(300),
		sdktest.Pod("pending-no-time", sdk.PhasePending).NoCreationTimestamp(),
	).View()
	var got []string
	for _, p := range replicaset.Pick(in.Pods, len(in.Pods)) {
		got = append(got, p.Name())
	}
	want := []string{"pending-no-time", "pending-new", "pending-old", "unknown", "running-not-ready", "new-ready", "old-ready"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
	if len(replicaset.Pick(in.Pods, -1)) != 0 {
		t.Error("a negative count picks nothing")
	}
}
