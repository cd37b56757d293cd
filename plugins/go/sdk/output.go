package sdk

import (
	"errors"
	"strconv"
	"strings"

	wit "github.com/wasm-operator/wasm-operator/plugins/go/bindings/imports/jinghzhu_operator_types"
	witTypes "go.bytecodealliance.org/pkg/wit/types"
)

// Output is what a reconcile proposes; the host applies it all or nothing.
// The zero value asks for nothing.
type Output struct {
	// CreatePods are the Pods to create.
	CreatePods []PodCreate
	// DeletePods are the names of owned Pods to delete.
	DeletePods []string
	// Status is the new status, or nil when nothing changed (no write).
	Status *Status
	// RequeueAfterMs asks for another reconcile after this many milliseconds.
	RequeueAfterMs *uint64
	// Events are recorded on the Jinghzhu.
	Events []Event
}

// IsEmpty reports whether o asks for nothing at all.
func (o Output) IsEmpty() bool {
	return len(o.CreatePods) == 0 && len(o.DeletePods) == 0 && o.Status == nil &&
		o.RequeueAfterMs == nil && len(o.Events) == 0
}

// PodCreate is a Pod the plugin wants created; the host sets its namespace,
// owner reference and its own labels.
type PodCreate struct {
	// Name is the exact name; empty to use GenerateName.
	Name string
	// GenerateName is a name prefix the API server completes; empty for none.
	GenerateName string
	// Labels to put on the Pod.
	Labels map[string]string
	// Annotations to put on the Pod.
	Annotations map[string]string
	// SpecJSON is the Pod spec as JSON; empty means the template's spec (or
	// the host's default template).
	SpecJSON string
}

// EventType is the severity of an Event.
type EventType uint8

// The event types, with the WIT `event-type` values.
const (
	EventNormal  EventType = EventType(wit.EventType_Normal)
	EventWarning EventType = EventType(wit.EventType_Warning)
)

// String is "Normal" or "Warning", as Kubernetes spells them.
func (t EventType) String() string {
	switch t {
	case EventNormal:
		return "Normal"
	case EventWarning:
		return "Warning"
	}
	return "EventType(" + strconv.Itoa(int(t)) + ")"
}

// Event is a Kubernetes Event to record on the Jinghzhu.
type Event struct {
	// Type is Normal or Warning.
	Type EventType
	// Reason is short UpperCamelCase, e.g. `ScalingUp`.
	Reason string
	// Message is a sentence for humans.
	Message string
}

// NormalEvent is a Normal Event.
func NormalEvent(reason, message string) Event {
	return Event{Type: EventNormal, Reason: reason, Message: message}
}

// WarningEvent is a Warning Event.
func WarningEvent(reason, message string) Event {
	return Event{Type: EventWarning, Reason: reason, Message: message}
}

// ReconcileError fails a reconcile: Retryable makes the host retry with
// backoff, otherwise it waits for a change to the object.
type ReconcileError struct {
	// Message says what went wrong, for logs and a Warning Event.
	Message string
	// Retryable is true when trying again later may succeed.
	Retryable bool
}

// Error is the message.
func (e *ReconcileError) Error() string { return e.Message }

// Retryable is an error the host retries with backoff.
func Retryable(message string) error { return &ReconcileError{Message: message, Retryable: true} }

// Fatal is an error the host does not retry until the object changes.
func Fatal(message string) error { return &ReconcileError{Message: message, Retryable: false} }

// StringTableBuilder interns strings into one wire string table, each
// distinct string once, the empty string as id 0. The zero value is ready.
type StringTableBuilder struct {
	ids   map[string]uint32
	bytes []byte
	ends  []uint32
}

func (b *StringTableBuilder) init() {
	if b.ends == nil {
		b.ends = []uint32{0}
		b.ids = map[string]uint32{}
	}
}

// Add returns the id of s, adding it when new.
func (b *StringTableBuilder) Add(s string) uint32 {
	b.init()
	if s == "" {
		return 0
	}
	if id, ok := b.ids[s]; ok {
		return id
	}
	b.bytes = append(b.bytes, s...)
	id := uint32(len(b.ends))
	b.ends = append(b.ends, uint32(len(b.bytes)))
	b.ids[s] = id
	return id
}

// Table is the wire table of the strings added so far.
func (b *StringTableBuilder) Table() wit.StringTable {
	b.init()
	return wit.StringTable{Bytes: b.bytes, Ends: b.ends}
}

// EncodeStatus is s as a wire status whose strings are in b.
func (b *StringTableBuilder) EncodeStatus(s Status) wit.JinghzhuStatus {
	out := wit.JinghzhuStatus{
		Current: s.Current,
		PodList: make([]uint32, len(s.PodList)),
		State:   b.Add(s.State),
		Message: b.Add(s.Message),
	}
	for i, n := range s.PodList {
		out.PodList[i] = b.Add(n)
	}
	if s.ObservedGeneration != nil {
		out.ObservedGeneration = witTypes.Some(*s.ObservedGeneration)
	}
	return out
}

// encoder builds one output: its string table and shared pairs, where
// identical maps share one span.
type encoder struct {
	b     StringTableBuilder
	pairs []wit.KeyValue
	spans map[string]wit.Span
}

// span encodes m sorted by key, reusing the span of an identical map.
func (e *encoder) span(m map[string]string) wit.Span {
	keys := SortedKeys(m)
	sig := signature(m, keys)
	if s, ok := e.spans[sig]; ok {
		return s
	}
	s := wit.Span{Start: uint32(len(e.pairs)), Len: uint32(len(keys))}
	for _, k := range keys {
		e.pairs = append(e.pairs, wit.KeyValue{Key: e.b.Add(k), Value: e.b.Add(m[k])})
	}
	e.spans[sig] = s
	return s
}

// signature is an unambiguous text of m's sorted entries.
func signature(m map[string]string, keys []string) string {
	var sb strings.Builder
	for _, k := range keys {
		v := m[k]
		sb.WriteString(strconv.Itoa(len(k)))
		sb.WriteByte(':')
		sb.WriteString(k)
		sb.WriteString(strconv.Itoa(len(v)))
		sb.WriteByte(':')
		sb.WriteString(v)
	}
	return sb.String()
}

func (e *encoder) optStr(s string) witTypes.Option[uint32] {
	if s == "" {
		return witTypes.None[uint32]()
	}
	return witTypes.Some(e.b.Add(s))
}

func (e *encoder) create(c PodCreate) wit.PodCreate {
	labels := e.span(c.Labels)
	annotations := e.span(c.Annotations)
	spec := e.b.Add(c.SpecJSON)
	return wit.PodCreate{
		Name:         e.optStr(c.Name),
		GenerateName: e.optStr(c.GenerateName),
		Labels:       labels,
		Annotations:  annotations,
		SpecJson:     spec,
	}
}

// Encode is o as a wire `reconcile-output`: one interned string table
// (string 0 is ""), label and annotation maps sorted by key, identical maps
// sharing one span.
func Encode(o Output) wit.ReconcileOutput {
	e := &encoder{spans: map[string]wit.Span{}}
	creates := make([]wit.PodCreate, len(o.CreatePods))
	for i, c := range o.CreatePods {
		creates[i] = e.create(c)
	}
	deletes := make([]uint32, len(o.DeletePods))
	for i, n := range o.DeletePods {
		deletes[i] = e.b.Add(n)
	}
	events := make([]wit.Event, len(o.Events))
	for i, ev := range o.Events {
		events[i] = wit.Event{EventType: uint8(ev.Type), Reason: e.b.Add(ev.Reason), Message: e.b.Add(ev.Message)}
	}
	out := wit.ReconcileOutput{Pairs: e.pairs, CreatePods: creates, DeletePods: deletes, Events: events}
	if o.Status != nil {
		out.Status = witTypes.Some(e.b.EncodeStatus(*o.Status))
	}
	if o.RequeueAfterMs != nil {
		out.RequeueAfterMs = witTypes.Some(*o.RequeueAfterMs)
	}
	out.Strings = e.b.Table()
	return out
}

// DecodeOutput is the Output a wire `reconcile-output` describes, the
// inverse of Encode, for tests and tools. Its strings share raw's memory;
// empty lists and maps decode as nil.
func DecodeOutput(raw *wit.ReconcileOutput) (Output, error) {
	if raw == nil {
		return Output{}, errors.New("no output")
	}
	if err := validateOutput(raw); err != nil {
		return Output{}, err
	}
	t := &tables{bytes: raw.Strings.Bytes, ends: raw.Strings.Ends, pairs: raw.Pairs}
	out := Output{CreatePods: decodeCreates(t, raw.CreatePods), Events: decodeEvents(t, raw.Events)}
	if len(raw.DeletePods) > 0 {
		out.DeletePods = t.strs(raw.DeletePods)
	}
	if raw.Status.IsSome() {
		s := raw.Status.Some()
		out.Status = t.status(&s)
	}
	if raw.RequeueAfterMs.IsSome() {
		ms := raw.RequeueAfterMs.Some()
		out.RequeueAfterMs = &ms
	}
	return out, nil
}

func decodeCreates(t *tables, raw []wit.PodCreate) []PodCreate {
	if len(raw) == 0 {
		return nil
	}
	out := make([]PodCreate, len(raw))
	for i, c := range raw {
		out[i] = PodCreate{
			Name:         optStr(t, c.Name),
			GenerateName: optStr(t, c.GenerateName),
			Labels:       t.stringMap(c.Labels),
			Annotations:  t.stringMap(c.Annotations),
			SpecJSON:     t.str(c.SpecJson),
		}
	}
	return out
}

// optStr decodes an optional string id, "" when absent.
func optStr(t *tables, id witTypes.Option[uint32]) string {
	if !id.IsSome() {
		return ""
	}
	return t.str(id.Some())
}

func decodeEvents(t *tables, raw []wit.Event) []Event {
	if len(raw) == 0 {
		return nil
	}
	out := make([]Event, len(raw))
	for i, e := range raw {
		out[i] = Event{Type: EventType(e.EventType), Reason: t.str(e.Reason), Message: t.str(e.Message)}
	}
	return out
}
