package sdk

import (
	"fmt"

	wit "github.com/wasm-operator/wasm-operator/plugins/go/bindings/imports/jinghzhu_operator_types"
	witTypes "go.bytecodealliance.org/pkg/wit/types"
)

// loc names a field of a raw record for error messages, formatted only
// when a check fails: `pods[3].metadata.name`, `jinghzhu.status.state`.
type loc struct {
	list  string
	index int
	field string
}

// String is the field's path.
func (l loc) String() string {
	if l.index < 0 {
		return l.list + "." + l.field
	}
	return fmt.Sprintf("%s[%d].%s", l.list, l.index, l.field)
}

// checker records the first out-of-range reference of a raw record.
type checker struct {
	strings int
	pairs   int
	owners  int
	err     error
}

// checkTable checks that ends is non-decreasing and within bytes.
func checkTable(t *wit.StringTable) error {
	prev := uint32(0)
	for i, end := range t.Ends {
		if end < prev {
			return fmt.Errorf("strings.ends[%d] = %d is before the end of the string before it (%d)", i, end, prev)
		}
		prev = end
	}
	if int64(prev) > int64(len(t.Bytes)) {
		return fmt.Errorf("strings.ends[%d] = %d is past the table's %d bytes", len(t.Ends)-1, prev, len(t.Bytes))
	}
	return nil
}

func (c *checker) str(id uint32, at loc) {
	if c.err == nil && int64(id) >= int64(c.strings) {
		c.err = fmt.Errorf("%s: string id %d is past the table's %d strings", at, id, c.strings)
	}
}

func (c *checker) optStr(id witTypes.Option[uint32], at loc) {
	if id.IsSome() {
		c.str(id.Some(), at)
	}
}

func (c *checker) span(s wit.Span, n int, list string, at loc) {
	if c.err == nil && uint64(s.Start)+uint64(s.Len) > uint64(n) {
		c.err = fmt.Errorf("%s: span %d+%d is outside the %d entries of %s", at, s.Start, s.Len, n, list)
	}
}

func (c *checker) strList(ids []uint32, at loc) {
	for i, id := range ids {
		if c.err == nil && int64(id) >= int64(c.strings) {
			c.err = fmt.Errorf("%s[%d]: string id %d is past the table's %d strings", at, i, id, c.strings)
		}
	}
}

func (c *checker) pairList(pairs []wit.KeyValue) {
	for i, kv := range pairs {
		c.str(kv.Key, loc{"pairs", i, "key"})
		c.str(kv.Value, loc{"pairs", i, "value"})
	}
}

func (c *checker) ownerList(owners []wit.OwnerReference) {
	for i, o := range owners {
		c.str(o.ApiVersion, loc{"owners", i, "apiVersion"})
		c.str(o.Kind, loc{"owners", i, "kind"})
		c.str(o.Name, loc{"owners", i, "name"})
		c.str(o.Uid, loc{"owners", i, "uid"})
	}
}

func (c *checker) meta(m *wit.ObjectMeta, list string, i int) {
	c.str(m.Name, loc{list, i, "metadata.name"})
	c.str(m.Namespace, loc{list, i, "metadata.namespace"})
	c.str(m.Uid, loc{list, i, "metadata.uid"})
	c.str(m.ResourceVersion, loc{list, i, "metadata.resourceVersion"})
	c.span(m.Labels, c.pairs, "pairs", loc{list, i, "metadata.labels"})
	c.span(m.Annotations, c.pairs, "pairs", loc{list, i, "metadata.annotations"})
	c.span(m.OwnerReferences, c.owners, "owners", loc{list, i, "metadata.ownerReferences"})
}

func (c *checker) status(s *wit.JinghzhuStatus, list string) {
	c.strList(s.PodList, loc{list, -1, "status.podList"})
	c.str(s.State, loc{list, -1, "status.state"})
	c.str(s.Message, loc{list, -1, "status.message"})
}

func (c *checker) jinghzhu(jz *wit.Jinghzhu) {
	c.meta(&jz.Metadata, "jinghzhu", -1)
	if jz.Spec.Template.IsSome() {
		t := jz.Spec.Template.Some()
		c.span(t.Labels, c.pairs, "pairs", loc{"jinghzhu", -1, "spec.template.labels"})
		c.span(t.Annotations, c.pairs, "pairs", loc{"jinghzhu", -1, "spec.template.annotations"})
		c.str(t.SpecJson, loc{"jinghzhu", -1, "spec.template.specJson"})
	}
	if jz.Status.IsSome() {
		s := jz.Status.Some()
		c.status(&s, "jinghzhu")
	}
}

func (c *checker) pods(pods []wit.Pod) {
	for i := range pods {
		c.meta(&pods[i].Metadata, "pods", i)
		if c.err == nil && pods[i].Phase > wit.PodPhase_Unknown {
			c.err = fmt.Errorf("pods[%d].phase: %d is not a pod phase", i, pods[i].Phase)
		}
	}
}

// validateInput checks every reference of a raw input up front.
func validateInput(raw *wit.ReconcileInput) error {
	if err := checkTable(&raw.Strings); err != nil {
		return err
	}
	c := checker{strings: len(raw.Strings.Ends), pairs: len(raw.Pairs), owners: len(raw.Owners)}
	c.pairList(raw.Pairs)
	c.ownerList(raw.Owners)
	c.jinghzhu(&raw.Jinghzhu)
	c.pods(raw.Pods)
	return c.err
}

func (c *checker) creates(creates []wit.PodCreate) {
	for i := range creates {
		pc := &creates[i]
		c.optStr(pc.Name, loc{"createPods", i, "name"})
		c.optStr(pc.GenerateName, loc{"createPods", i, "generateName"})
		c.span(pc.Labels, c.pairs, "pairs", loc{"createPods", i, "labels"})
		c.span(pc.Annotations, c.pairs, "pairs", loc{"createPods", i, "annotations"})
		c.str(pc.SpecJson, loc{"createPods", i, "specJson"})
	}
}

func (c *checker) events(events []wit.Event) {
	for i, e := range events {
		c.str(e.Reason, loc{"events", i, "reason"})
		c.str(e.Message, loc{"events", i, "message"})
		if c.err == nil && e.EventType > wit.EventType_Warning {
			c.err = fmt.Errorf("events[%d].eventType: %d is not an event type", i, e.EventType)
		}
	}
}

// validateOutput checks every reference of a raw output up front.
func validateOutput(raw *wit.ReconcileOutput) error {
	if err := checkTable(&raw.Strings); err != nil {
		return err
	}
	c := checker{strings: len(raw.Strings.Ends), pairs: len(raw.Pairs)}
	c.pairList(raw.Pairs)
	c.creates(raw.CreatePods)
	c.strList(raw.DeletePods, loc{"output", -1, "deletePods"})
	if raw.Status.IsSome() {
		s := raw.Status.Some()
		c.status(&s, "output")
	}
	c.events(raw.Events)
	return c.err
}
