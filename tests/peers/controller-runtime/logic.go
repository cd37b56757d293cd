// The ReplicaSet-like decisions, mirrored from plugins/replicaset-logic (the
// logic the Wasm host runs as a plugin) and the plugin SDK's pod and status
// helpers, so the three controllers of the scale benchmark do exactly the
// same thing: which pods are live and ready, how many to create or delete,
// which go first, the status texts; plus what the host itself adds
// (host/crates/model/src/observed.rs: status.readyReplicas; host/src/apply: the
// aggregated SuccessfulCreate/SuccessfulDelete Events, the only Events: the
// plugin proposes none of its own).
package main

import (
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
)

const (
	// burstReplicas caps creates (and deletes) per reconcile, as the
	// ReplicaSet controller's burstReplicas and the plugin's BURST_REPLICAS.
	burstReplicas = 500
	// eventNameLimit is how many pod names an Event lists before "and N
	// more": the host's NAMES_PER_EVENT (SuccessfulCreate, SuccessfulDelete).
	eventNameLimit = 10
	// maxNoteLength is where Event notes are cut, as the host does.
	maxNoteLength = 1000

	stateRunning = "Running"
	statePending = "Pending"
	stateScaling = "Scaling"
)

// isControlledBy: the pod's controller owner reference has this uid.
func isControlledBy(pod *corev1.Pod, uid string) bool {
	for _, ref := range pod.OwnerReferences {
		if ref.Controller != nil && *ref.Controller && string(ref.UID) == uid {
			return true
		}
	}
	return false
}

// isLive: neither terminating nor finished (Succeeded or Failed).
func isLive(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil {
		return false
	}
	return pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

// livePods are the pods controlled by uid that are live.
func livePods(pods []corev1.Pod, uid string) []*corev1.Pod {
	live := make([]*corev1.Pod, 0, len(pods))
	for i := range pods {
		if isControlledBy(&pods[i], uid) && isLive(&pods[i]) {
			live = append(live, &pods[i])
		}
	}
	return live
}

// isReady: the pod has a Ready condition that is True (the plugin's
// pod.ready, the host's observed::is_ready), whatever its phase.
func isReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// isRunningAndReady: phase Running and Ready (the SDK's is_running_and_ready).
func isRunningAndReady(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodRunning && isReady(pod)
}

// countReady is how many of pods are live, running and ready (the SDK's
// count_ready): the "ready" of the status message and state.
func countReady(pods []*corev1.Pod) int {
	n := 0
	for _, p := range pods {
		if isLive(p) && isRunningAndReady(p) {
			n++
		}
	}
	return n
}

// readyReplicas is the host's status.readyReplicas (observed::ready_replicas):
// pods controlled by uid that are live with a True Ready condition, in any
// phase.
func readyReplicas(pods []corev1.Pod, uid string) int64 {
	var n int64
	for i := range pods {
		if isControlledBy(&pods[i], uid) && isLive(&pods[i]) && isReady(&pods[i]) {
			n++
		}
	}
	return n
}

// phaseRank: pending, then unknown, then running go first. A missing or
// unrecognised phase is Pending, as the host passes it to the plugin.
func phaseRank(pod *corev1.Pod) int {
	switch pod.Status.Phase {
	case corev1.PodRunning:
		return 2
	case corev1.PodUnknown:
		return 1
	case corev1.PodSucceeded, corev1.PodFailed:
		return 3
	default:
		return 0
	}
}

// deleteBefore: true when a should be deleted before b (the ActivePods order
// as far as the plugin's input tells: phase, not ready, newer, name).
func deleteBefore(a, b *corev1.Pod) bool {
	if ra, rb := phaseRank(a), phaseRank(b); ra != rb {
		return ra < rb
	}
	if ya, yb := isReady(a), isReady(b); ya != yb {
		return !ya
	}
	// Missing creation time first, then newest first (seconds, then
	// nanoseconds, as the plugin's timestamps compare).
	ta, tb := a.CreationTimestamp, b.CreationTimestamp
	if az, bz := ta.IsZero(), tb.IsZero(); az != bz {
		return az
	}
	if !ta.IsZero() && !ta.Equal(&tb) {
		return tb.Before(&ta)
	}
	return a.Name < b.Name
}

// pickForDeletion returns the names of the count pods to delete, first to go first.
func pickForDeletion(live []*corev1.Pod, count int) []string {
	ordered := append([]*corev1.Pod(nil), live...)
	sort.SliceStable(ordered, func(i, j int) bool { return deleteBefore(ordered[i], ordered[j]) })
	if count < len(ordered) {
		ordered = ordered[:count]
	}
	names := make([]string, len(ordered))
	for i, p := range ordered {
		names[i] = p.Name
	}
	return names
}

// plan is what one reconcile decides.
type plan struct {
	create  int
	delete  int
	message string
}

// decide compares desired with the live count; ready is how many live pods
// are running and ready (for the message).
func decide(desired int64, current, ready int) plan {
	p := plan{}
	activity := ""
	switch {
	case desired > int64(current):
		p.create = min(int(desired)-current, burstReplicas)
		activity = fmt.Sprintf("; creating %d", p.create)
	case int64(current) > desired:
		p.delete = min(current-int(desired), burstReplicas)
		activity = fmt.Sprintf("; deleting %d", p.delete)
	}
	p.message = statusMessage(current, ready, desired, activity)
	return p
}

// statusMessage is "<current>/<desired> pods, <ready>/<desired> ready" and
// the activity ("; creating N", "; deleting N" or nothing).
func statusMessage(current, ready int, desired int64, activity string) string {
	return fmt.Sprintf("%d/%d pods, %d/%d ready%s", current, desired, ready, desired, activity)
}

// state is Scaling while the live count differs from desired, Pending while
// some live pods are not running and ready, else Running (status::state).
func state(live, ready int, desired int64) string {
	switch {
	case int64(live) != desired:
		return stateScaling
	case ready < live:
		return statePending
	default:
		return stateRunning
	}
}

// observedStatus is the status the plugin computes for the live pods
// (without readyReplicas, which the host adds).
func observedStatus(jz *Jinghzhu, live []*corev1.Pod, message string) JinghzhuStatus {
	names := make([]string, 0, len(live))
	for _, p := range live {
		names = append(names, p.Name)
	}
	sort.Strings(names)
	status := JinghzhuStatus{
		Current: int64(len(live)),
		PodList: names,
		State:   state(len(live), countReady(live), jz.Spec.Desired),
		Message: message,
	}
	if jz.Generation != 0 {
		g := jz.Generation
		status.ObservedGeneration = &g
	}
	return status
}

// statusEqual is the plugin's status_equal: same counts, texts, generation
// and pod names (in any order). readyReplicas is not part of it (the plugin
// never sees it).
func statusEqual(a *JinghzhuStatus, b JinghzhuStatus) bool {
	if a == nil {
		return false
	}
	if a.Current != b.Current || a.State != b.State || a.Message != b.Message ||
		len(a.PodList) != len(b.PodList) || !int64PtrEqual(a.ObservedGeneration, b.ObservedGeneration) {
		return false
	}
	x := append([]string(nil), a.PodList...)
	y := append([]string(nil), b.PodList...)
	sort.Strings(x)
	sort.Strings(y)
	for i := range x {
		if x[i] != y[i] {
			return false
		}
	}
	return true
}

// statusProposal is what the plugin returns: computed when it differs from
// stored (status::patch_for), else nil.
func statusProposal(stored *JinghzhuStatus, computed JinghzhuStatus) *JinghzhuStatus {
	if statusEqual(stored, computed) {
		return nil
	}
	return &computed
}

// statusToWrite is the host's observed::status_to_write: the proposal, or
// without one the stored status, with readyReplicas set to ready; nil when
// there is neither. The caller writes it only when it is not identical to
// stored (statusIdentical).
func statusToWrite(stored, proposed *JinghzhuStatus, ready int64) *JinghzhuStatus {
	base := proposed
	if base == nil {
		base = stored
	}
	if base == nil {
		return nil
	}
	status := new(JinghzhuStatus)
	base.DeepCopyInto(status)
	if status.PodList == nil {
		// The host writes `podList: []` for a missing list (and a merge
		// patch with null would delete the field).
		status.PodList = []string{}
	}
	status.ReadyReplicas = &ready
	return status
}

// statusIdentical is the host's `==` on statuses: every field, the pod
// list in order (a missing list equals an empty one, as the host reads it).
func statusIdentical(a, b *JinghzhuStatus) bool {
	if a == nil || b == nil {
		return a == b
	}
	if a.Current != b.Current || a.State != b.State || a.Message != b.Message ||
		!int64PtrEqual(a.ReadyReplicas, b.ReadyReplicas) ||
		!int64PtrEqual(a.ObservedGeneration, b.ObservedGeneration) ||
		len(a.PodList) != len(b.PodList) {
		return false
	}
	for i := range a.PodList {
		if a.PodList[i] != b.PodList[i] {
			return false
		}
	}
	return true
}

func int64PtrEqual(a, b *int64) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

// nameList is "a, b, c" for at most eventNameLimit names, then " and N more".
func nameList(names []string) string {
	listed := names
	if len(listed) > eventNameLimit {
		listed = listed[:eventNameLimit]
	}
	text := strings.Join(listed, ", ")
	if len(names) > eventNameLimit {
		text += fmt.Sprintf(" and %d more", len(names)-eventNameLimit)
	}
	return text
}

// createdEvent is the host's one SuccessfulCreate message per reconcile.
func createdEvent(names []string) string {
	return fmt.Sprintf("Created %d pod(s): %s", len(names), nameList(names))
}

// deletedEvent is the host's one SuccessfulDelete message per reconcile.
func deletedEvent(names []string) string {
	return fmt.Sprintf("Deleted %d pod(s): %s", len(names), nameList(names))
}

// truncateNote cuts note to maxNoteLength bytes at a character boundary and
// appends "…", as the host does.
func truncateNote(note string) string {
	if len(note) <= maxNoteLength {
		return note
	}
	end := maxNoteLength
	for end > 0 && !utf8.RuneStart(note[end]) {
		end--
	}
	return note[:end] + "…"
}
