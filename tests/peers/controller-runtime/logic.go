// The ReplicaSet-like decisions, mirrored from plugins/replicaset-logic (the
// logic the Wasm host runs as a plugin) so the three controllers of the scale
// benchmark do exactly the same thing: which pods are live, how many to
// create or delete, which go first, and the status and event texts.
package main

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

const (
	// burstReplicas caps creates (and deletes) per reconcile, as the
	// ReplicaSet controller's burstReplicas and the plugin's BURST_REPLICAS.
	burstReplicas = 500
	// eventNameLimit is how many pod names a ScalingDown event lists.
	eventNameLimit = 10

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

// isReady: the pod's Ready condition is True.
func isReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// phaseRank: pending, then unknown, then running go first.
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
	// Missing creation time first, then newest first (at the second, as the
	// plugin sees timestamps).
	ta, tb := a.CreationTimestamp, b.CreationTimestamp
	if az, bz := ta.IsZero(), tb.IsZero(); az != bz {
		return az
	}
	if !ta.IsZero() && ta.Unix() != tb.Unix() {
		return ta.Unix() > tb.Unix()
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

// decide compares desired with the live count.
func decide(desired int64, current int) plan {
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
	p.message = fmt.Sprintf("%d/%d pods%s", current, desired, activity)
	return p
}

// state is Running at the desired count, Pending with none yet, else Scaling.
func state(current int, desired int64) string {
	switch {
	case int64(current) == desired:
		return stateRunning
	case current == 0:
		return statePending
	default:
		return stateScaling
	}
}

// observedStatus describes the live pods.
func observedStatus(jz *Jinghzhu, live []*corev1.Pod, message string) JinghzhuStatus {
	names := make([]string, 0, len(live))
	for _, p := range live {
		names = append(names, p.Name)
	}
	sort.Strings(names)
	status := JinghzhuStatus{
		Current: int64(len(live)),
		PodList: names,
		State:   state(len(live), jz.Spec.Desired),
		Message: message,
	}
	if jz.Generation != 0 {
		g := jz.Generation
		status.ObservedGeneration = &g
	}
	return status
}

// statusEqual: same counts, texts, generation and pod names (in any order).
func statusEqual(a *JinghzhuStatus, b JinghzhuStatus) bool {
	if a == nil {
		return false
	}
	if a.Current != b.Current || a.State != b.State || a.Message != b.Message ||
		len(a.PodList) != len(b.PodList) {
		return false
	}
	if (a.ObservedGeneration == nil) != (b.ObservedGeneration == nil) ||
		(a.ObservedGeneration != nil && *a.ObservedGeneration != *b.ObservedGeneration) {
		return false
	}
	x := append([]string(nil), a.PodList...)
	sort.Strings(x)
	for i := range x {
		if x[i] != b.PodList[i] {
			return false
		}
	}
	return true
}

// scalingUpEvent is the ScalingUp event's message.
func scalingUpEvent(count int) string {
	return fmt.Sprintf("Creating %d pod(s)", count)
}

// scalingDownEvent is the ScalingDown event's message.
func scalingDownEvent(names []string) string {
	listed := names
	if len(listed) > eventNameLimit {
		listed = listed[:eventNameLimit]
	}
	text := fmt.Sprintf("Deleting %d pod(s): %s", len(names), strings.Join(listed, ", "))
	if len(names) > eventNameLimit {
		text += fmt.Sprintf(" and %d more", len(names)-eventNameLimit)
	}
	return text
}
