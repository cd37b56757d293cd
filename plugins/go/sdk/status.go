package sdk

import (
	"slices"
	"sort"
)

// The states a status reports.
const (
	// StateRunning: all desired Pods live, running and ready.
	StateRunning = "Running"
	// StatePending: the count is right but some Pods are not ready yet.
	StatePending = "Pending"
	// StateScaling: the live count differs from desired.
	StateScaling = "Scaling"
)

// StateFor is Scaling while live != desired, else Pending while
// ready < live, else Running (0 wanted and none there is Running).
func StateFor(live, ready, desired int) string {
	if live != desired {
		return StateScaling
	}
	if ready < live {
		return StatePending
	}
	return StateRunning
}

// BuildStatus is a status listing podNames sorted, Current their count.
func BuildStatus(podNames []string, state, message string, observedGeneration *int64) Status {
	names := append(make([]string, 0, len(podNames)), podNames...)
	sort.Strings(names)
	return Status{
		Current:            uint32(len(names)),
		PodList:            names,
		State:              state,
		Message:            message,
		ObservedGeneration: observedGeneration,
	}
}

func sameGeneration(a, b *int64) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

// StatusEqual reports that a and b say the same thing (the order of
// PodList aside).
func StatusEqual(a, b Status) bool {
	if a.Current != b.Current || a.State != b.State || a.Message != b.Message ||
		!sameGeneration(a.ObservedGeneration, b.ObservedGeneration) || len(a.PodList) != len(b.PodList) {
		return false
	}
	x, y := slices.Clone(a.PodList), slices.Clone(b.PodList)
	sort.Strings(x)
	sort.Strings(y)
	return slices.Equal(x, y)
}

// StatusPatch is computed when it differs from observed (or there is
// none), nil when nothing changed: no write.
func StatusPatch(observed *Status, computed Status) *Status {
	if observed != nil && StatusEqual(*observed, computed) {
		return nil
	}
	return &computed
}

// PatchFor is StatusPatch against the status jz has.
func PatchFor(jz Jinghzhu, computed Status) *Status {
	return StatusPatch(jz.Status(), computed)
}
