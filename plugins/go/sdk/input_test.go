package sdk_test

import (
	"reflect"
	"strings"
	"testing"

	wit "github.com/wasm-operator/wasm-operator/plugins/go/bindings/imports/jinghzhu_operator_types"
	"github.com/wasm-operator/wasm-operator/plugins/go/sdk"
	"github.com/wasm-operator/wasm-operator/plugins/go/sdk/sdktest"
	witTypes "go.bytecodealliance.org/pkg/wit/types"
)

func builtInput() *sdktest.InputBuilder {
	gen := int64(3)
	jz := sdktest.Jinghzhu("web", "ns", 2).Label("team", "a").Label("app", "web").Generation(4).
		WithTemplate(sdk.Template{Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"n": "é"}, SpecJSON: `{"x":1}`}).
		WithStatus(sdk.Status{Current: 1, PodList: []string{"web-a"}, State: "Running", Message: "1/2", ObservedGeneration: &gen})
	return sdktest.NewInput(jz).
		Pod(sdktest.Pod("web-b", sdk.PhaseUnknown).Label("x", "1").Label("b", "2").Label("日本", "3")).
		Pod(sdktest.Pod("web-a", sdk.PhaseRunning).Terminating()).
		Now(9)
}

func TestDecodeViews(t *testing.T) {
	in := builtInput().View()
	jz := in.Jinghzhu
	m := jz.Metadata
	got := []any{jz.Name(), m.Namespace(), m.UID(), m.ResourceVersion(), m.Generation(), jz.Desired}
	if want := []any{"web", "ns", "uid-web", "1", int64(4), uint32(2)}; !reflect.DeepEqual(got, want) {
		t.Errorf("jinghzhu = %v, want %v", got, want)
	}
	if !reflect.DeepEqual(m.Labels(), map[string]string{"team": "a", "app": "web"}) || m.Annotations() != nil {
		t.Errorf("labels = %v, annotations = %v", m.Labels(), m.Annotations())
	}
	if c := m.CreationTimestamp(); c == nil || c.Seconds != sdktest.DefaultCreated || m.DeletionTimestamp() != nil {
		t.Errorf("timestamps = %v %v", c, m.DeletionTimestamp())
	}
	if in.Now != (sdk.Timestamp{Seconds: 9}) || in.Raw == nil {
		t.Errorf("now = %v", in.Now)
	}
}

func TestDecodeTemplateAndStatus(t *testing.T) {
	jz := builtInput().View().Jinghzhu
	tpl := jz.Template()
	if tpl == nil || tpl.SpecJSON != `{"x":1}` || tpl.Annotations["n"] != "é" || tpl.Labels["app"] != "web" {
		t.Errorf("template = %+v", tpl)
	}
	st := jz.Status()
	if st == nil || st.Current != 1 || !reflect.DeepEqual(st.PodList, []string{"web-a"}) || st.State != "Running" ||
		st.Message != "1/2" || st.ObservedGeneration == nil || *st.ObservedGeneration != 3 {
		t.Errorf("status = %+v", st)
	}
	plain := sdktest.NewInput(sdktest.Jinghzhu("w", "d", 1)).View().Jinghzhu
	if plain.Template() != nil || plain.Status() != nil {
		t.Error("absent template and status decode as nil")
	}
}

func TestDecodePodsSortedWithOwners(t *testing.T) {
	pods := builtInput().View().Pods
	if len(pods) != 2 || pods[0].Name() != "web-a" || pods[1].Name() != "web-b" {
		t.Fatalf("pods = %v", sdk.SortedNames(pods))
	}
	a, b := pods[0], pods[1]
	if a.Phase != sdk.PhaseRunning || !a.Ready || a.Metadata.DeletionTimestamp() == nil || a.Metadata.Namespace() != "ns" {
		t.Errorf("web-a = %+v", a)
	}
	if b.Phase != sdk.PhaseUnknown || b.Phase.String() != "unknown" || b.Ready {
		t.Errorf("web-b phase %v ready %v", b.Phase, b.Ready)
	}
	want := []sdk.OwnerReference{{APIVersion: "jinghzhu.io/v1", Kind: "Jinghzhu", Name: "web", UID: "uid-web", Controller: true}}
	if !reflect.DeepEqual(b.Metadata.OwnerReferences(), want) {
		t.Errorf("owners = %+v", b.Metadata.OwnerReferences())
	}
	if uid, ok := b.Metadata.ControllerUID(); !ok || uid != "uid-web" {
		t.Errorf("controller uid = %q %v", uid, ok)
	}
}

func TestLabelBinarySearch(t *testing.T) {
	m := builtInput().View().Pods[1].Metadata
	for key, want := range map[string]string{"b": "2", "x": "1", "日本": "3"} {
		if v, ok := m.Label(key); !ok || v != want {
			t.Errorf("Label(%q) = %q, %v", key, v, ok)
		}
	}
	for _, key := range []string{"", "a", "c", "y", "日"} {
		if v, ok := m.Label(key); ok {
			t.Errorf("Label(%q) = %q, want none", key, v)
		}
	}
	if _, ok := (sdk.ObjectMeta{}).Label("x"); ok {
		t.Error("zero metadata has no labels")
	}
}

func TestDecodeSharesTheTableBytes(t *testing.T) {
	raw := builtInput().Build()
	in, err := sdk.Decode(&raw)
	if err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() { _ = in.Jinghzhu.Name() + "" })
	if allocs != 0 {
		t.Errorf("reading a name allocates %v times", allocs)
	}
}

func decodeErr(t *testing.T, mutate func(raw *wit.ReconcileInput)) string {
	t.Helper()
	raw := builtInput().Build()
	mutate(&raw)
	_, err := sdk.Decode(&raw)
	if err == nil {
		t.Fatal("Decode accepted a broken input")
	}
	return err.Error()
}

func TestDecodeRejectsOutOfRange(t *testing.T) {
	cases := []struct {
		want   string
		mutate func(raw *wit.ReconcileInput)
	}{
		{"pods[1].metadata.name: string id 999", func(r *wit.ReconcileInput) { r.Pods[1].Metadata.Name = 999 }},
		{"jinghzhu.metadata.labels: span 1+99", func(r *wit.ReconcileInput) { r.Jinghzhu.Metadata.Labels = wit.Span{Start: 1, Len: 99} }},
		{"pods[0].metadata.ownerReferences: span 4294967295+2", func(r *wit.ReconcileInput) {
			r.Pods[0].Metadata.OwnerReferences = wit.Span{Start: 1<<32 - 1, Len: 2}
		}},
		{"pairs[0].value: string id", func(r *wit.ReconcileInput) { r.Pairs[0].Value = 1 << 20 }},
		{"owners[0].uid: string id", func(r *wit.ReconcileInput) { r.Owners[0].Uid = 1 << 20 }},
		{"jinghzhu.status.podList[0]: string id", func(r *wit.ReconcileInput) {
			s := r.Jinghzhu.Status.Some()
			s.PodList = []uint32{500}
			r.Jinghzhu.Status = witTypes.Some(s)
		}},
		{"jinghzhu.spec.template.specJson", func(r *wit.ReconcileInput) {
			tpl := r.Jinghzhu.Spec.Template.Some()
			tpl.SpecJson = 500
			r.Jinghzhu.Spec.Template = witTypes.Some(tpl)
		}},
		{"pods[0].phase: 9", func(r *wit.ReconcileInput) { r.Pods[0].Phase = 9 }},
		{"strings.ends[2] = 0 is before", func(r *wit.ReconcileInput) { r.Strings.Ends[2] = 0 }},
		{"is past the table's", func(r *wit.ReconcileInput) { r.Strings.Bytes = r.Strings.Bytes[:3] }},
	}
	for _, c := range cases {
		if got := decodeErr(t, c.mutate); !strings.Contains(got, c.want) {
			t.Errorf("error %q does not contain %q", got, c.want)
		}
	}
	if _, err := sdk.Decode(nil); err == nil {
		t.Error("Decode(nil) succeeded")
	}
}
