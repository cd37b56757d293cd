package sdk_test

import (
	"reflect"
	"testing"

	"github.com/wasm-operator/wasm-operator/plugins/go/sdk"
	"github.com/wasm-operator/wasm-operator/plugins/go/sdk/sdktest"
)

func helperInput() sdk.Input {
	return sdktest.NewInput(sdktest.Jinghzhu("w", "d", 3)).Pods(
		sdktest.Pod("w-d", sdk.PhaseRunning).Ready(false),
		sdktest.Pod("w-c", sdk.PhaseFailed),
		sdktest.Pod("w-b", sdk.PhaseRunning).Terminating(),
		sdktest.Pod("w-a", sdk.PhaseRunning),
		sdktest.Pod("w-e", sdk.PhaseRunning).Unowned(),
	).View()
}

func TestPodHelpers(t *testing.T) {
	in := helperInput()
	if got := sdk.SortedNames(sdk.LivePods(in.Pods)); !reflect.DeepEqual(got, []string{"w-a", "w-d", "w-e"}) {
		t.Errorf("live = %v", got)
	}
	if n := sdk.CountReady(in.Pods); n != 2 {
		t.Errorf("ready = %d", n)
	}
	p := in.Pods
	if !sdk.IsTerminating(p[1]) || !sdk.IsFinished(p[2]) || sdk.IsLive(p[2]) || !sdk.IsRunningAndReady(p[0]) || sdk.IsRunningAndReady(p[3]) {
		t.Error("pod predicates")
	}
	if !sdk.IsControlledBy(p[0], in.Jinghzhu) || sdk.IsControlledBy(p[4], in.Jinghzhu) {
		t.Error("IsControlledBy")
	}
	reversed := []sdk.Pod{p[4], p[3], p[2], p[1], p[0]}
	if got := sdk.SortedNames(reversed); !reflect.DeepEqual(got, []string{"w-a", "w-b", "w-c", "w-d", "w-e"}) {
		t.Errorf("sorted = %v", got)
	}
}

func TestFromTemplate(t *testing.T) {
	in := helperInput()
	if got := sdk.FromTemplate(in.Jinghzhu); !reflect.DeepEqual(got, sdk.PodCreate{GenerateName: "w-"}) {
		t.Errorf("no template: %+v", got)
	}
	jz := sdktest.Jinghzhu("w", "d", 1).WithTemplate(sdk.Template{Labels: map[string]string{"a": "1"}, SpecJSON: "  \n"})
	got := sdk.FromTemplate(sdktest.NewInput(jz).View().Jinghzhu)
	if want := (sdk.PodCreate{GenerateName: "w-", Labels: map[string]string{"a": "1"}}); !reflect.DeepEqual(got, want) {
		t.Errorf("blank spec: %+v", got)
	}
	if sdk.GenerateNameFor(in.Jinghzhu) != "w-" {
		t.Error("GenerateNameFor")
	}
}

func TestStatusHelpers(t *testing.T) {
	states := []string{sdk.StateFor(0, 0, 3), sdk.StateFor(3, 2, 3), sdk.StateFor(3, 3, 3), sdk.StateFor(0, 0, 0)}
	if !reflect.DeepEqual(states, []string{"Scaling", "Pending", "Running", "Running"}) {
		t.Errorf("states = %v", states)
	}
	one := int64(1)
	a := sdk.BuildStatus([]string{"b", "a"}, "Running", "m", &one)
	if a.Current != 2 || !reflect.DeepEqual(a.PodList, []string{"a", "b"}) {
		t.Errorf("built %+v", a)
	}
	other := int64(1)
	b := sdk.Status{Current: 2, PodList: []string{"b", "a"}, State: "Running", Message: "m", ObservedGeneration: &other}
	if !sdk.StatusEqual(a, b) || sdk.StatusPatch(&b, a) != nil || sdk.StatusPatch(nil, a) == nil {
		t.Error("equal statuses need no patch")
	}
	b.ObservedGeneration = nil
	if sdk.StatusEqual(a, b) || sdk.StatusPatch(&b, a) == nil {
		t.Error("a different generation needs a patch")
	}
	if sdk.BuildStatus(nil, "Running", "", nil).PodList == nil {
		t.Error("an empty pod list is not nil")
	}
	if sdk.PatchFor(helperInput().Jinghzhu, a) == nil {
		t.Error("PatchFor without a status")
	}
}

func TestKeyValueHelpers(t *testing.T) {
	// Code point order: U+FF5E sorts before U+1F600.
	keys := sdk.SortedKeys(map[string]string{"\U0001F600": "", "\uFF5E": "", "b": ""})
	if !reflect.DeepEqual(keys, []string{"b", "\uFF5E", "\U0001F600"}) {
		t.Errorf("keys = %q", keys)
	}
	got := sdk.Merge(map[string]string{"b": "2", "a": "1"}, map[string]string{"b": "x"})
	if !reflect.DeepEqual(got, map[string]string{"a": "1", "b": "x"}) || sdk.Merge(nil, nil) != nil {
		t.Errorf("merge = %v", got)
	}
}
