package sdktest_test

import (
	"testing"

	wit "github.com/wasm-operator/wasm-operator/plugins/go/bindings/imports/jinghzhu_operator_types"
	"github.com/wasm-operator/wasm-operator/plugins/go/sdk"
	"github.com/wasm-operator/wasm-operator/plugins/go/sdk/sdktest"
)

func TestEncodeInputLaysOutAsTheHost(t *testing.T) {
	raw := sdktest.NewInput(sdktest.Jinghzhu("web", "ns", 1)).Pods(
		sdktest.Pod("web-b", sdk.PhasePending).Label("z", "1").Label("a", "2"),
		sdktest.Pod("web-a", sdk.PhaseRunning),
	).Build()
	if raw.Strings.Ends[0] != 0 {
		t.Error("string 0 is not empty")
	}
	in, err := sdk.Decode(&raw)
	if err != nil {
		t.Fatal(err)
	}
	if in.Pods[0].Name() != "web-a" || in.Pods[1].Name() != "web-b" {
		t.Error("pods are not sorted by name")
	}
	span := raw.Pods[1].Metadata.Labels
	if span.Len != 2 || str(raw, raw.Pairs[span.Start].Key) != "a" || str(raw, raw.Pairs[span.Start+1].Key) != "z" {
		t.Errorf("labels span %v is not sorted by key", span)
	}
	if v, ok := in.Pods[1].Metadata.Label("a"); !ok || v != "2" {
		t.Error("labels are not sorted by key")
	}
	if in.Pods[0].Metadata.Namespace() != "ns" || len(in.Pods[0].Metadata.OwnerReferences()) != 1 {
		t.Error("pods default to the Jinghzhu's namespace and controller")
	}
}

func str(raw wit.ReconcileInput, id uint32) string {
	start := uint32(0)
	if id > 0 {
		start = raw.Strings.Ends[id-1]
	}
	return string(raw.Strings.Bytes[start:raw.Strings.Ends[id]])
}

func TestBuildersDoNotShareState(t *testing.T) {
	jz := sdktest.Jinghzhu("w", "d", 1).Label("a", "1")
	b := sdktest.NewInput(jz)
	jz.Label("b", "2")
	objs := b.Objects()
	objs.Jinghzhu.Metadata.Labels["c"] = "3"
	if got := b.Objects().Jinghzhu.Metadata.Labels; len(got) != 1 {
		t.Errorf("labels = %v", got)
	}
}
