package sdk_test

import (
	"reflect"
	"strings"
	"testing"

	wit "github.com/wasm-operator/wasm-operator/plugins/go/bindings/imports/jinghzhu_operator_types"
	"github.com/wasm-operator/wasm-operator/plugins/go/sdk"
)

func sampleOutput() sdk.Output {
	gen, ms := int64(3), uint64(5)
	labels := map[string]string{"k": "v", "a": "b"}
	return sdk.Output{
		CreatePods: []sdk.PodCreate{
			{GenerateName: "a-", Labels: labels},
			{Name: "fixed", Labels: map[string]string{"a": "b", "k": "v"}, Annotations: map[string]string{"n": "x"}, SpecJSON: "{}"},
		},
		DeletePods:     []string{"a-1", "v"},
		Status:         &sdk.Status{Current: 1, PodList: []string{"a-1"}, State: "Running", Message: "ok", ObservedGeneration: &gen},
		RequeueAfterMs: &ms,
		Events:         []sdk.Event{sdk.WarningEvent("Bad", "ünïcode"), sdk.NormalEvent("Good", "ok")},
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	out := sampleOutput()
	raw := sdk.Encode(out)
	if raw.Strings.Ends[0] != 0 {
		t.Errorf("string 0 is not empty: ends %v", raw.Strings.Ends)
	}
	back, err := sdk.DecodeOutput(&raw)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, out) {
		t.Errorf("round trip:\n got %+v\nwant %+v", back, out)
	}
	if !raw.CreatePods[1].Name.IsSome() || raw.CreatePods[0].Name.IsSome() || raw.CreatePods[1].GenerateName.IsSome() {
		t.Error("empty names must be absent options")
	}
}

func TestEncodeInternsAndSharesSpans(t *testing.T) {
	raw := sdk.Encode(sampleOutput())
	// "", a-, k, v, a, b, n, x, fixed, {}, a-1, Bad, ünïcode, Good, ok, Running: "v" and "ok" once each.
	if n := len(raw.Strings.Ends); n != 16 {
		t.Errorf("%d strings, want 16", n)
	}
	c0, c1 := raw.CreatePods[0], raw.CreatePods[1]
	if c0.Labels != c1.Labels || c0.Labels.Len != 2 {
		t.Errorf("identical label maps do not share a span: %v %v", c0.Labels, c1.Labels)
	}
	if c0.Annotations != (wit.Span{Start: 2, Len: 0}) || len(raw.Pairs) != 3 {
		t.Errorf("annotations %v, %d pairs", c0.Annotations, len(raw.Pairs))
	}
	if k0, k1 := decodeKey(raw, 0), decodeKey(raw, 1); k0 != "a" || k1 != "k" {
		t.Errorf("pairs are not sorted by key: %q %q", k0, k1)
	}
}

func decodeKey(raw wit.ReconcileOutput, i int) string {
	id := raw.Pairs[i].Key
	start := uint32(0)
	if id > 0 {
		start = raw.Strings.Ends[id-1]
	}
	return string(raw.Strings.Bytes[start:raw.Strings.Ends[id]])
}

func TestEmptyOutput(t *testing.T) {
	if !(sdk.Output{}).IsEmpty() || sampleOutput().IsEmpty() {
		t.Error("IsEmpty")
	}
	raw := sdk.Encode(sdk.Output{})
	if raw.Status.IsSome() || raw.RequeueAfterMs.IsSome() || len(raw.Strings.Ends) != 1 {
		t.Errorf("empty output encodes as %+v", raw)
	}
	back, err := sdk.DecodeOutput(&raw)
	if err != nil || !back.IsEmpty() {
		t.Errorf("decoded %+v, %v", back, err)
	}
}

func TestDecodeOutputRejectsOutOfRange(t *testing.T) {
	raw := sdk.Encode(sampleOutput())
	raw.DeletePods[1] = 77
	if _, err := sdk.DecodeOutput(&raw); err == nil || !strings.Contains(err.Error(), "deletePods[1]: string id 77") {
		t.Errorf("err = %v", err)
	}
	raw = sdk.Encode(sampleOutput())
	raw.CreatePods[0].Labels.Len = 9
	if _, err := sdk.DecodeOutput(&raw); err == nil || !strings.Contains(err.Error(), "createPods[0].labels") {
		t.Errorf("err = %v", err)
	}
}
