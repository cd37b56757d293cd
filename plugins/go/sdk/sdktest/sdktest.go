// Package sdktest builds reconcile inputs for native unit tests (the port
// of the JavaScript SDK's testing.js), and EncodeInput lays plain objects
// out as a wire `reconcile-input` the way the host does.
//
//	in := sdktest.NewInput(sdktest.Jinghzhu("demo", "default", 3)).
//		Pod(sdktest.Pod("demo-a", sdk.PhasePending)).View()
//
// Defaults: uids `uid-<name>`, generation 1, created an hour before
// DefaultNow, Pods in the Jinghzhu's namespace with a controller owner
// reference to it (unless Unowned), Pods sorted by name.
package sdktest

import (
	"maps"
	"slices"
	"strings"

	wit "github.com/wasm-operator/wasm-operator/plugins/go/bindings/imports/jinghzhu_operator_types"
	"github.com/wasm-operator/wasm-operator/plugins/go/sdk"
	witTypes "go.bytecodealliance.org/pkg/wit/types"
)

// APIVersion is the Jinghzhu's API group and version.
const APIVersion = "jinghzhu.io/v1"

// Kind is the Jinghzhu's kind.
const Kind = "Jinghzhu"

// DefaultNow is `now` of built inputs (2023-11-14T22:13:20Z).
const DefaultNow int64 = 1700000000

// DefaultCreated is the default creation time: an hour before DefaultNow.
const DefaultCreated = DefaultNow - 3600

// TS is a timestamp of whole seconds.
func TS(seconds int64) sdk.Timestamp { return sdk.Timestamp{Seconds: seconds} }

// Meta is plain object metadata; nil timestamps are absent.
type Meta struct {
	// Name is the object's name.
	Name string
	// Namespace is the object's namespace ("" for a Pod: the Jinghzhu's).
	Namespace string
	// UID is the object's uid.
	UID string
	// ResourceVersion is the object's resource version.
	ResourceVersion string
	// Generation is metadata.generation (0 when not tracked).
	Generation int64
	// Labels of the object (any order; encoded sorted).
	Labels map[string]string
	// Annotations of the object (any order; encoded sorted).
	Annotations map[string]string
	// CreationTimestamp is when the object was created, or nil.
	CreationTimestamp *sdk.Timestamp
	// DeletionTimestamp is set when the object is being deleted.
	DeletionTimestamp *sdk.Timestamp
	// OwnerReferences are the object's owners.
	OwnerReferences []sdk.OwnerReference
}

// JinghzhuObject is a plain Jinghzhu; nil Template or Status are absent.
type JinghzhuObject struct {
	// Metadata of the Jinghzhu.
	Metadata Meta
	// Desired is spec.desired.
	Desired uint32
	// Template is spec.template, or nil.
	Template *sdk.Template
	// Status is the stored status, or nil.
	Status *sdk.Status
}

// PodObject is a plain Pod.
type PodObject struct {
	// Metadata of the Pod.
	Metadata Meta
	// Phase of the Pod.
	Phase sdk.Phase
	// Ready is the Pod's Ready condition.
	Ready bool
}

// Objects are everything an input holds.
type Objects struct {
	// Jinghzhu is the object being reconciled.
	Jinghzhu JinghzhuObject
	// Pods are the Pods passed to the plugin (any order; encoded sorted).
	Pods []PodObject
	// Now is the input's clock.
	Now sdk.Timestamp
}

// NewMeta is metadata with the builders' defaults.
func NewMeta(name, namespace string) Meta {
	created := TS(DefaultCreated)
	return Meta{
		Name: name, Namespace: namespace, UID: "uid-" + name, ResourceVersion: "1",
		Generation: 1, CreationTimestamp: &created,
	}
}

// ControllerReference is the controller owner reference a Pod of owner carries.
func ControllerReference(owner JinghzhuObject) sdk.OwnerReference {
	return sdk.OwnerReference{
		APIVersion: APIVersion, Kind: Kind, Name: owner.Metadata.Name,
		UID: owner.Metadata.UID, Controller: true,
	}
}

// Clone is a deep copy of m.
func (m Meta) Clone() Meta {
	out := m
	out.Labels = maps.Clone(m.Labels)
	out.Annotations = maps.Clone(m.Annotations)
	out.CreationTimestamp = cloneTime(m.CreationTimestamp)
	out.DeletionTimestamp = cloneTime(m.DeletionTimestamp)
	out.OwnerReferences = slices.Clone(m.OwnerReferences)
	return out
}

func cloneTime(t *sdk.Timestamp) *sdk.Timestamp {
	if t == nil {
		return nil
	}
	c := *t
	return &c
}

// Clone is a deep copy of j.
func (j JinghzhuObject) Clone() JinghzhuObject {
	out := j
	out.Metadata = j.Metadata.Clone()
	if j.Template != nil {
		t := *j.Template
		t.Labels, t.Annotations = maps.Clone(t.Labels), maps.Clone(t.Annotations)
		out.Template = &t
	}
	out.Status = CloneStatus(j.Status)
	return out
}

// CloneStatus is a deep copy of s (nil for nil).
func CloneStatus(s *sdk.Status) *sdk.Status {
	if s == nil {
		return nil
	}
	c := *s
	c.PodList = slices.Clone(s.PodList)
	if s.ObservedGeneration != nil {
		g := *s.ObservedGeneration
		c.ObservedGeneration = &g
	}
	return &c
}

// Clone is a deep copy of o.
func (o Objects) Clone() Objects {
	out := Objects{Jinghzhu: o.Jinghzhu.Clone(), Now: o.Now}
	out.Pods = make([]PodObject, len(o.Pods))
	for i, p := range o.Pods {
		out.Pods[i] = PodObject{Metadata: p.Metadata.Clone(), Phase: p.Phase, Ready: p.Ready}
	}
	return out
}

// SortPods sorts pods by name (code point order), as the host sends them.
func SortPods(pods []PodObject) {
	slices.SortStableFunc(pods, func(a, b PodObject) int {
		return strings.Compare(a.Metadata.Name, b.Metadata.Name)
	})
}

// inputEncoder lays objects out in one table and shared lists.
type inputEncoder struct {
	b      sdk.StringTableBuilder
	pairs  []wit.KeyValue
	owners []wit.OwnerReference
}

func (e *inputEncoder) span(m map[string]string) wit.Span {
	keys := sdk.SortedKeys(m)
	s := wit.Span{Start: uint32(len(e.pairs)), Len: uint32(len(keys))}
	for _, k := range keys {
		e.pairs = append(e.pairs, wit.KeyValue{Key: e.b.Add(k), Value: e.b.Add(m[k])})
	}
	return s
}

func optTime(t *sdk.Timestamp) witTypes.Option[wit.Timestamp] {
	if t == nil {
		return witTypes.None[wit.Timestamp]()
	}
	return witTypes.Some(*t)
}

func (e *inputEncoder) meta(m Meta) wit.ObjectMeta {
	out := wit.ObjectMeta{
		Name: e.b.Add(m.Name), Namespace: e.b.Add(m.Namespace), Uid: e.b.Add(m.UID),
		ResourceVersion: e.b.Add(m.ResourceVersion), Generation: m.Generation,
		Labels: e.span(m.Labels), Annotations: e.span(m.Annotations),
		CreationTimestamp: optTime(m.CreationTimestamp), DeletionTimestamp: optTime(m.DeletionTimestamp),
	}
	start := uint32(len(e.owners))
	for _, r := range m.OwnerReferences {
		e.owners = append(e.owners, wit.OwnerReference{
			ApiVersion: e.b.Add(r.APIVersion), Kind: e.b.Add(r.Kind), Name: e.b.Add(r.Name),
			Uid: e.b.Add(r.UID), Controller: r.Controller,
		})
	}
	out.OwnerReferences = wit.Span{Start: start, Len: uint32(len(m.OwnerReferences))}
	return out
}

func (e *inputEncoder) jinghzhu(j JinghzhuObject) wit.Jinghzhu {
	out := wit.Jinghzhu{Metadata: e.meta(j.Metadata), Spec: wit.JinghzhuSpec{Desired: j.Desired}}
	if t := j.Template; t != nil {
		out.Spec.Template = witTypes.Some(wit.PodTemplate{
			Labels: e.span(t.Labels), Annotations: e.span(t.Annotations), SpecJson: e.b.Add(t.SpecJSON),
		})
	}
	if j.Status != nil {
		out.Status = witTypes.Some(e.b.EncodeStatus(*j.Status))
	}
	return out
}

// EncodeInput is the wire `reconcile-input` for o, laid out as the host
// does: one string table (string 0 is ""), pods sorted by name, pairs
// sorted by key within each span.
func EncodeInput(o Objects) wit.ReconcileInput {
	e := &inputEncoder{}
	jz := e.jinghzhu(o.Jinghzhu)
	sorted := slices.Clone(o.Pods)
	SortPods(sorted)
	pods := make([]wit.Pod, len(sorted))
	for i, p := range sorted {
		pods[i] = wit.Pod{Metadata: e.meta(p.Metadata), Phase: uint8(p.Phase), Ready: p.Ready}
	}
	return wit.ReconcileInput{
		Strings: e.b.Table(), Pairs: e.pairs, Owners: e.owners,
		Jinghzhu: jz, Pods: pods, Now: o.Now,
	}
}
