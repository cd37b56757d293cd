package sdk

import (
	"maps"
	"sort"
	"strings"
)

// IsTerminating reports that deletion of p was requested.
func IsTerminating(p Pod) bool { return p.Metadata.deleting() }

// IsFinished reports phase Succeeded or Failed: p will never run again.
func IsFinished(p Pod) bool { return p.Phase == PhaseSucceeded || p.Phase == PhaseFailed }

// IsLive reports that p counts towards `desired`: neither terminating nor
// finished.
func IsLive(p Pod) bool { return !IsTerminating(p) && !IsFinished(p) }

// IsRunningAndReady reports phase Running and a `Ready` condition `True`.
func IsRunningAndReady(p Pod) bool { return p.Phase == PhaseRunning && p.Ready }

// CountReady is how many of pods are live and running and ready.
func CountReady(pods []Pod) int {
	n := 0
	for _, p := range pods {
		if IsLive(p) && IsRunningAndReady(p) {
			n++
		}
	}
	return n
}

// LivePods are the live Pods among pods, in their order.
func LivePods(pods []Pod) []Pod {
	out := make([]Pod, 0, len(pods))
	for _, p := range pods {
		if IsLive(p) {
			out = append(out, p)
		}
	}
	return out
}

// IsControlledBy reports that p's controller owner reference points at
// owner (by uid).
func IsControlledBy(p Pod, owner Jinghzhu) bool {
	return p.Metadata.controlledBy(owner.Metadata.UID())
}

// SortedNames are the names of pods in code point order.
func SortedNames(pods []Pod) []string {
	names := make([]string, len(pods))
	for i, p := range pods {
		names[i] = p.Name()
	}
	sort.Strings(names)
	return names
}

// GenerateNameFor is `<jinghzhu-name>-`, the prefix of its Pods' names.
func GenerateNameFor(jz Jinghzhu) string { return jz.Name() + "-" }

// FromTemplate is a create for one new Pod of jz: GenerateName `<name>-`,
// the template's labels, annotations and spec (SpecJSON empty without a
// template or with a blank spec: the host's default pod template).
func FromTemplate(jz Jinghzhu) PodCreate {
	c := PodCreate{GenerateName: GenerateNameFor(jz)}
	t := jz.Template()
	if t == nil {
		return c
	}
	c.Labels = maps.Clone(t.Labels)
	c.Annotations = maps.Clone(t.Annotations)
	if strings.TrimSpace(t.SpecJSON) != "" {
		c.SpecJSON = t.SpecJSON
	}
	return c
}
