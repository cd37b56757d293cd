package sdk

import (
	"errors"
	"sort"
	"strconv"
	"strings"
	"unsafe"

	wit "github.com/wasm-operator/wasm-operator/plugins/go/bindings/imports/jinghzhu_operator_types"
	witTypes "go.bytecodealliance.org/pkg/wit/types"
)

// Timestamp is a point in time, UTC: seconds and nanoseconds since the Unix
// epoch (the WIT `timestamp`).
type Timestamp = wit.Timestamp

// tables are the shared parts of a raw input or output that views read:
// the string table and the flat pairs and owners lists.
type tables struct {
	bytes  []byte
	ends   []uint32
	pairs  []wit.KeyValue
	owners []wit.OwnerReference
}

// str is string id, sharing the table's bytes ("" when out of range).
func (t *tables) str(id uint32) string {
	if t == nil || int(id) >= len(t.ends) {
		return ""
	}
	start, end := uint32(0), t.ends[id]
	if id > 0 {
		start = t.ends[id-1]
	}
	if end <= start || int(end) > len(t.bytes) {
		return ""
	}
	return unsafe.String(&t.bytes[start], int(end-start))
}

// pairsOf is the entries of span in the pairs list (nil when out of range).
func (t *tables) pairsOf(s wit.Span) []wit.KeyValue {
	if t == nil || uint64(s.Start)+uint64(s.Len) > uint64(len(t.pairs)) {
		return nil
	}
	return t.pairs[s.Start : s.Start+s.Len]
}

// ownersOf is the entries of span in the owners list (nil when out of range).
func (t *tables) ownersOf(s wit.Span) []wit.OwnerReference {
	if t == nil || uint64(s.Start)+uint64(s.Len) > uint64(len(t.owners)) {
		return nil
	}
	return t.owners[s.Start : s.Start+s.Len]
}

// stringMap decodes span into a fresh map (nil for an empty span); a later
// duplicate key wins.
func (t *tables) stringMap(s wit.Span) map[string]string {
	kvs := t.pairsOf(s)
	if len(kvs) == 0 {
		return nil
	}
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[t.str(kv.Key)] = t.str(kv.Value)
	}
	return m
}

// strs decodes a list of string ids.
func (t *tables) strs(ids []uint32) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = t.str(id)
	}
	return out
}

// status decodes a raw status.
func (t *tables) status(s *wit.JinghzhuStatus) *Status {
	out := &Status{
		Current: s.Current,
		PodList: t.strs(s.PodList),
		State:   t.str(s.State),
		Message: t.str(s.Message),
	}
	if s.ObservedGeneration.IsSome() {
		g := s.ObservedGeneration.Some()
		out.ObservedGeneration = &g
	}
	return out
}

// Input is everything a reconcile may know, as views over the raw input.
type Input struct {
	// Jinghzhu is the object being reconciled.
	Jinghzhu Jinghzhu
	// Pods are the Pods it controls, terminating ones included, sorted by name.
	Pods []Pod
	// Now is the host's clock at the start of this reconcile.
	Now Timestamp
	// Raw is the wire record the views read.
	Raw *wit.ReconcileInput
}

// Decode checks every string id, span and the string table of raw, then
// returns views over it. The views share raw's memory and never panic.
func Decode(raw *wit.ReconcileInput) (Input, error) {
	if raw == nil {
		return Input{}, errors.New("no input")
	}
	if err := validateInput(raw); err != nil {
		return Input{}, err
	}
	t := &tables{bytes: raw.Strings.Bytes, ends: raw.Strings.Ends, pairs: raw.Pairs, owners: raw.Owners}
	pods := make([]Pod, len(raw.Pods))
	for i := range raw.Pods {
		p := &raw.Pods[i]
		pods[i] = Pod{Metadata: ObjectMeta{t: t, m: &p.Metadata}, Phase: Phase(p.Phase), Ready: p.Ready}
	}
	jz := Jinghzhu{
		Metadata: ObjectMeta{t: t, m: &raw.Jinghzhu.Metadata},
		Desired:  raw.Jinghzhu.Spec.Desired,
		t:        t,
		raw:      &raw.Jinghzhu,
	}
	return Input{Jinghzhu: jz, Pods: pods, Now: raw.Now, Raw: raw}, nil
}

// OwnerReference is a reference from an object to the object that owns it.
type OwnerReference struct {
	// APIVersion is the owner's API group and version, e.g. `jinghzhu.io/v1`.
	APIVersion string
	// Kind is the owner's kind, e.g. `Jinghzhu`.
	Kind string
	// Name is the owner's name (same namespace as the owned object).
	Name string
	// UID identifies the owner for certain.
	UID string
	// Controller is true when the owner is the managing controller.
	Controller bool
}

// ObjectMeta is a view of the metadata of the Jinghzhu or of a Pod; its
// text fields decode when read. The zero value reads as empty metadata.
type ObjectMeta struct {
	t *tables
	m *wit.ObjectMeta
}

var zeroMeta wit.ObjectMeta

func (o ObjectMeta) raw() *wit.ObjectMeta {
	if o.m == nil {
		return &zeroMeta
	}
	return o.m
}

// Name is the object's name, unique within its namespace.
func (o ObjectMeta) Name() string { return o.t.str(o.raw().Name) }

// Namespace is the namespace the object lives in.
func (o ObjectMeta) Namespace() string { return o.t.str(o.raw().Namespace) }

// UID is the unique id the API server assigned at creation.
func (o ObjectMeta) UID() string { return o.t.str(o.raw().Uid) }

// ResourceVersion is the opaque version of this state of the object.
func (o ObjectMeta) ResourceVersion() string { return o.t.str(o.raw().ResourceVersion) }

// Generation increases with each spec change (0 when not tracked).
func (o ObjectMeta) Generation() int64 { return o.raw().Generation }

// CreationTimestamp is when the object was created, or nil.
func (o ObjectMeta) CreationTimestamp() *Timestamp { return optTime(o.raw().CreationTimestamp) }

// DeletionTimestamp is set (non-nil) when deletion was requested.
func (o ObjectMeta) DeletionTimestamp() *Timestamp { return optTime(o.raw().DeletionTimestamp) }

// deleting reports a deletion timestamp without allocating.
func (o ObjectMeta) deleting() bool { return o.raw().DeletionTimestamp.IsSome() }

func optTime(opt witTypes.Option[wit.Timestamp]) *Timestamp {
	if !opt.IsSome() {
		return nil
	}
	ts := opt.Some()
	return &ts
}

// Labels are the object's labels, a fresh map on each call (nil when none).
func (o ObjectMeta) Labels() map[string]string { return o.t.stringMap(o.raw().Labels) }

// Annotations are the object's annotations, a fresh map on each call.
func (o ObjectMeta) Annotations() map[string]string { return o.t.stringMap(o.raw().Annotations) }

// Label is the value of label key, found by binary search in the sorted
// labels without building a map.
func (o ObjectMeta) Label(key string) (string, bool) {
	kvs := o.t.pairsOf(o.raw().Labels)
	i, found := sort.Find(len(kvs), func(i int) int {
		return strings.Compare(key, o.t.str(kvs[i].Key))
	})
	if !found {
		return "", false
	}
	return o.t.str(kvs[i].Value), true
}

// OwnerReferences are the object's owners, a fresh slice on each call.
func (o ObjectMeta) OwnerReferences() []OwnerReference {
	raw := o.t.ownersOf(o.raw().OwnerReferences)
	if len(raw) == 0 {
		return nil
	}
	out := make([]OwnerReference, len(raw))
	for i, r := range raw {
		out[i] = OwnerReference{
			APIVersion: o.t.str(r.ApiVersion),
			Kind:       o.t.str(r.Kind),
			Name:       o.t.str(r.Name),
			UID:        o.t.str(r.Uid),
			Controller: r.Controller,
		}
	}
	return out
}

// ControllerUID is the uid of the owner reference marked controller.
func (o ObjectMeta) ControllerUID() (string, bool) {
	for _, r := range o.t.ownersOf(o.raw().OwnerReferences) {
		if r.Controller {
			return o.t.str(r.Uid), true
		}
	}
	return "", false
}

// controlledBy reports a controller owner reference with this uid.
func (o ObjectMeta) controlledBy(uid string) bool {
	for _, r := range o.t.ownersOf(o.raw().OwnerReferences) {
		if r.Controller && o.t.str(r.Uid) == uid {
			return true
		}
	}
	return false
}

// Phase is the lifecycle phase of a Pod (`core/v1 PodStatus.phase`).
type Phase uint8

// The pod phases, with the WIT `pod-phase` values.
const (
	PhasePending   Phase = Phase(wit.PodPhase_Pending)
	PhaseRunning   Phase = Phase(wit.PodPhase_Running)
	PhaseSucceeded Phase = Phase(wit.PodPhase_Succeeded)
	PhaseFailed    Phase = Phase(wit.PodPhase_Failed)
	PhaseUnknown   Phase = Phase(wit.PodPhase_Unknown)
)

var phaseNames = [...]string{"pending", "running", "succeeded", "failed", "unknown"}

// String is the phase in lower case, e.g. "running".
func (p Phase) String() string {
	if int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return "phase(" + strconv.Itoa(int(p)) + ")"
}

// Pod is a view of a Pod the Jinghzhu controls.
type Pod struct {
	// Metadata of the Pod; DeletionTimestamp is set while it terminates.
	Metadata ObjectMeta
	// Phase is the phase the Pod's status reports.
	Phase Phase
	// Ready is true when the Pod's `Ready` condition is `True`.
	Ready bool
}

// Name is the Pod's name.
func (p Pod) Name() string { return p.Metadata.Name() }

// Jinghzhu is a view of the object being reconciled.
type Jinghzhu struct {
	// Metadata of the Jinghzhu.
	Metadata ObjectMeta
	// Desired is the number of Pods that should be running.
	Desired uint32
	t       *tables
	raw     *wit.Jinghzhu
}

// Name is the Jinghzhu's name.
func (j Jinghzhu) Name() string { return j.Metadata.Name() }

// Template is the pod template, decoded on each call, or nil when absent.
func (j Jinghzhu) Template() *Template {
	if j.raw == nil || !j.raw.Spec.Template.IsSome() {
		return nil
	}
	t := j.raw.Spec.Template.Some()
	return &Template{
		Labels:      j.t.stringMap(t.Labels),
		Annotations: j.t.stringMap(t.Annotations),
		SpecJSON:    j.t.str(t.SpecJson),
	}
}

// Status is the status stored on the object, decoded on each call, or nil
// before the operator first wrote one.
func (j Jinghzhu) Status() *Status {
	if j.raw == nil || !j.raw.Status.IsSome() {
		return nil
	}
	s := j.raw.Status.Some()
	return j.t.status(&s)
}

// Template is the template for the Pods a Jinghzhu runs.
type Template struct {
	// Labels to put on each Pod.
	Labels map[string]string
	// Annotations to put on each Pod.
	Annotations map[string]string
	// SpecJSON is the Pod spec as JSON text; empty when the template has none.
	SpecJSON string
}

// Status is what the operator observed and reports on the Jinghzhu.
type Status struct {
	// Current is the number of live Pods.
	Current uint32
	// PodList holds the names of those Pods, sorted.
	PodList []string
	// State is a one word summary (`Running`, `Pending`, `Scaling`...).
	State string
	// Message is a sentence for humans.
	Message string
	// ObservedGeneration is the generation this status describes, or nil.
	ObservedGeneration *int64
}
