// Package replicaset is the replicaset plugin's logic in Go: exactly what
// the Rust `replicaset-logic` crate and the JavaScript plugin do.
//
// It keeps `desired` live Pods: too few, create the difference from the
// template (at most BurstReplicas per reconcile); too many, delete the
// surplus (not running before running, not ready before ready, newer
// before older, then by name); finished and terminating Pods are replaced,
// never deleted; the status (count, names, "3/3 pods, 2/3 ready", state) is
// returned only when it changed. It proposes no Event of its own: the host
// records one SuccessfulCreate or SuccessfulDelete per reconcile naming the
// Pods, so a second Event for the same scale would only cost a write; its
// "scaling up"/"scaling down" line is at debug (the host's info line names
// the Pods).
package replicaset

import (
	"fmt"
	"slices"
	"strings"

	"github.com/wasm-operator/wasm-operator/plugins/go/sdk"
)

// PluginName is the plugin's name, shown in logs and on reconciled objects.
const PluginName = "replicaset-go"

// Version is the plugin's version.
const Version = "0.1.0"

// BurstReplicas is the most Pods created (or deleted) per reconcile (the
// ReplicaSet controller's burstReplicas).
const BurstReplicas = 500

// Activity is what a reconcile does about the Pod count.
type Activity string

// The activities, as the status message reports them.
const (
	// ActivitySteady: the count is right.
	ActivitySteady Activity = "steady"
	// ActivityCreating: too few live Pods.
	ActivityCreating Activity = "creating"
	// ActivityDeleting: too many live Pods.
	ActivityDeleting Activity = "deleting"
	// ActivityOwnerDeleting: the Jinghzhu is being deleted; nothing changes.
	ActivityOwnerDeleting Activity = "owner-deleting"
)

// phaseRank orders phases for deletion: lower goes first.
func phaseRank(p sdk.Phase) int {
	switch p {
	case sdk.PhasePending:
		return 0
	case sdk.PhaseUnknown:
		return 1
	case sdk.PhaseRunning:
		return 2
	}
	return 3
}

// CompareDeletionPriority is negative when a should be deleted before b:
// lower phase rank, not ready, no creation time, newer, then by name.
func CompareDeletionPriority(a, b sdk.Pod) int {
	if rank := phaseRank(a.Phase) - phaseRank(b.Phase); rank != 0 {
		return rank
	}
	if a.Ready != b.Ready {
		if a.Ready {
			return 1
		}
		return -1
	}
	x, y := a.Metadata.CreationTimestamp(), b.Metadata.CreationTimestamp()
	switch {
	case x == nil && y != nil:
		return -1
	case x != nil && y == nil:
		return 1
	case x != nil && y != nil:
		if c := sdk.CompareTimestamps(*y, *x); c != 0 {
			return c
		}
	}
	return strings.Compare(a.Name(), b.Name())
}

// Pick is the count Pods of candidates to delete, first to go first.
func Pick(candidates []sdk.Pod, count int) []sdk.Pod {
	sorted := slices.Clone(candidates)
	slices.SortStableFunc(sorted, CompareDeletionPriority)
	return sorted[:max(0, min(count, len(sorted)))]
}

// LivePods are the Pods controlled by jz (by uid), neither terminating nor
// finished.
func LivePods(jz sdk.Jinghzhu, pods []sdk.Pod) []sdk.Pod {
	out := make([]sdk.Pod, 0, len(pods))
	for _, p := range pods {
		if sdk.IsControlledBy(p, jz) && sdk.IsLive(p) {
			out = append(out, p)
		}
	}
	return out
}

// StatusMessage is the status sentence, e.g. "3/1 pods, 2/1 ready; deleting 2".
func StatusMessage(current, ready, desired int, activity Activity, n int) string {
	text := fmt.Sprintf("%d/%d pods, %d/%d ready", current, desired, ready, desired)
	switch activity {
	case ActivityCreating:
		text += fmt.Sprintf("; creating %d", n)
	case ActivityDeleting:
		text += fmt.Sprintf("; deleting %d", n)
	case ActivityOwnerDeleting:
		text += "; Jinghzhu is being deleted"
	}
	return text
}

// plan is what to do about the count, and for how many Pods.
func plan(jz sdk.Jinghzhu, live, desired int) (Activity, int) {
	switch {
	case jz.Metadata.DeletionTimestamp() != nil:
		return ActivityOwnerDeleting, 0
	case desired > live:
		return ActivityCreating, min(desired-live, BurstReplicas)
	case live > desired:
		return ActivityDeleting, min(live-desired, BurstReplicas)
	}
	return ActivitySteady, 0
}

func names(pods []sdk.Pod) []string {
	out := make([]string, len(pods))
	for i, p := range pods {
		out[i] = p.Name()
	}
	return out
}

// Reconcile keeps jz's desired number of live Pods and reports the status.
func Reconcile(ctx sdk.Context, in sdk.Input) (sdk.Output, error) {
	jz := in.Jinghzhu
	live := LivePods(jz, in.Pods)
	desired := int(jz.Desired)
	activity, n := plan(jz, len(live), desired)
	var out sdk.Output
	switch activity {
	case ActivityCreating:
		out.CreatePods = slices.Repeat([]sdk.PodCreate{sdk.FromTemplate(jz)}, n)
		ctx.Log.Debug("scaling up", "jinghzhu", jz.Name(), "live", len(live), "desired", desired, "creating", n)
	case ActivityDeleting:
		out.DeletePods = names(Pick(live, n))
		ctx.Log.Debug("scaling down", "jinghzhu", jz.Name(), "live", len(live), "desired", desired,
			"deleting", strings.Join(out.DeletePods, ","))
	}
	ready := sdk.CountReady(live)
	var observed *int64
	if g := jz.Metadata.Generation(); g != 0 {
		observed = &g
	}
	computed := sdk.BuildStatus(names(live), sdk.StateFor(len(live), ready, desired),
		StatusMessage(len(live), ready, desired, activity, n), observed)
	out.Status = sdk.PatchFor(jz, computed)
	return out, nil
}
