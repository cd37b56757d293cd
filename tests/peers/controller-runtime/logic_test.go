package main

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func pod(name string, phase corev1.PodPhase, ready bool, created int64) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{Phase: phase}}
	if created != 0 {
		p.CreationTimestamp = metav1.NewTime(time.Unix(created, 0))
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	return p
}

// The same case as plugins/replicaset-logic's deletion::order_follows_active_pods.
func TestDeletionOrderFollowsActivePods(t *testing.T) {
	pods := []corev1.Pod{
		pod("old-ready", corev1.PodRunning, true, 100),
		pod("new-ready", corev1.PodRunning, true, 200),
		pod("running-not-ready", corev1.PodRunning, false, 50),
		pod("unknown", corev1.PodUnknown, true, 10),
		pod("pending-old", corev1.PodPending, true, 10),
		pod("pending-new", corev1.PodPending, true, 300),
		pod("pending-no-time", corev1.PodPending, true, 0),
	}
	live := make([]*corev1.Pod, len(pods))
	for i := range pods {
		live[i] = &pods[i]
	}
	want := []string{"pending-no-time", "pending-new", "pending-old", "unknown", "running-not-ready", "new-ready", "old-ready"}
	if got := pickForDeletion(live, len(live)); !reflect.DeepEqual(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	if got := pickForDeletion(live, 2); !reflect.DeepEqual(got, want[:2]) {
		t.Fatalf("first two %v", got)
	}
}

// The same case as plugins/replicaset-logic's deletion::ties_break_by_name.
func TestDeletionTiesBreakByName(t *testing.T) {
	pods := []corev1.Pod{pod("b", corev1.PodRunning, true, 0), pod("a", corev1.PodRunning, true, 0)}
	if got := pickForDeletion([]*corev1.Pod{&pods[0], &pods[1]}, 1); !reflect.DeepEqual(got, []string{"a"}) {
		t.Fatalf("picked %v", got)
	}
}

// The cases of plugins/replicaset-logic's message tests and the SDK's
// status::state tests.
func TestMessagesAndStates(t *testing.T) {
	cases := []struct {
		desired int64
		current int
		ready   int
		want    plan
		state   string
	}{
		{3, 2, 1, plan{create: 1, message: "2/3 pods, 1/3 ready; creating 1"}, stateScaling},
		{1, 3, 3, plan{delete: 2, message: "3/1 pods, 3/1 ready; deleting 2"}, stateScaling},
		{3, 3, 3, plan{message: "3/3 pods, 3/3 ready"}, stateRunning},
		{3, 3, 2, plan{message: "3/3 pods, 2/3 ready"}, statePending},
		{1, 1, 0, plan{message: "1/1 pods, 0/1 ready"}, statePending},
		{3, 0, 0, plan{create: 3, message: "0/3 pods, 0/3 ready; creating 3"}, stateScaling},
		{0, 0, 0, plan{message: "0/0 pods, 0/0 ready"}, stateRunning},
		{1000, 0, 0, plan{create: 500, message: "0/1000 pods, 0/1000 ready; creating 500"}, stateScaling},
		{2, 1000, 1000, plan{delete: 500, message: "1000/2 pods, 1000/2 ready; deleting 500"}, stateScaling},
	}
	for _, c := range cases {
		if got := decide(c.desired, c.current, c.ready); got != c.want {
			t.Errorf("decide(%d, %d, %d) = %+v, want %+v", c.desired, c.current, c.ready, got, c.want)
		}
		if got := state(c.current, c.ready, c.desired); got != c.state {
			t.Errorf("state(%d, %d, %d) = %s, want %s", c.current, c.ready, c.desired, got, c.state)
		}
	}
}

// The host's aggregated SuccessfulCreate/SuccessfulDelete messages
// (host/src/apply: name_list) and its note truncation.
func TestHostEvents(t *testing.T) {
	if got := createdEvent([]string{"web-a"}); got != "Created 1 pod(s): web-a" {
		t.Errorf("created: %q", got)
	}
	many := []string{"p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p9", "p10", "p11"}
	if got := createdEvent(many); got != "Created 12 pod(s): p0, p1, p2, p3, p4, p5, p6, p7, p8, p9 and 2 more" {
		t.Errorf("created: %q", got)
	}
	if got := deletedEvent(many[:10]); got != "Deleted 10 pod(s): p0, p1, p2, p3, p4, p5, p6, p7, p8, p9" {
		t.Errorf("deleted: %q", got)
	}
	short := strings.Repeat("a", maxNoteLength)
	if truncateNote(short) != short {
		t.Error("a note at the limit is kept whole")
	}
	// "é" is two bytes: the cut must not split it.
	long := strings.Repeat("a", maxNoteLength-1) + "é" + "b"
	if got := truncateNote(long); got != strings.Repeat("a", maxNoteLength-1)+"…" {
		t.Errorf("truncated %q", got[maxNoteLength-5:])
	}
}

// The cases of the SDK's pod::readiness and the host's
// observed::only_live_ready_pods_count.
func TestReadiness(t *testing.T) {
	controller := true
	owned := func(p corev1.Pod) corev1.Pod {
		p.OwnerReferences = []metav1.OwnerReference{{UID: "uid-1", Controller: &controller}}
		return p
	}
	terminating := owned(pod("terminating-ready", corev1.PodRunning, true, 1))
	now := metav1.Now()
	terminating.DeletionTimestamp = &now
	noStatus := owned(corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "no-status"}})
	pods := []corev1.Pod{
		owned(pod("ready", corev1.PodRunning, true, 1)),
		owned(pod("running-not-ready", corev1.PodRunning, false, 1)),
		owned(pod("pending", corev1.PodPending, false, 1)),
		terminating,
		owned(pod("failed", corev1.PodFailed, false, 1)),
		owned(pod("succeeded-with-stale-ready", corev1.PodSucceeded, true, 1)),
		noStatus,
		pod("not-ours", corev1.PodRunning, true, 1),
	}
	if got := readyReplicas(pods, "uid-1"); got != 1 {
		t.Errorf("readyReplicas = %d, want 1", got)
	}
	// Ready but not Running (the kubelet never reports it, but the counts
	// are defined apart): the host counts it, the plugin's message does not.
	pendingReady := owned(pod("pending-ready", corev1.PodPending, true, 1))
	both := []corev1.Pod{pods[0], pendingReady}
	if got := readyReplicas(both, "uid-1"); got != 2 {
		t.Errorf("readyReplicas = %d, want 2", got)
	}
	if got := countReady(livePods(both, "uid-1")); got != 1 {
		t.Errorf("countReady = %d, want 1", got)
	}
	all := make([]*corev1.Pod, 0, len(pods))
	for i := range pods {
		if pods[i].Name != "not-ours" {
			all = append(all, &pods[i])
		}
	}
	if got := countReady(all); got != 1 {
		t.Errorf("countReady = %d: terminating and finished pods never count", got)
	}
	// A second, later Ready condition that is True still counts (any, not first).
	twice := owned(pod("twice", corev1.PodRunning, false, 1))
	twice.Status.Conditions = append(twice.Status.Conditions,
		corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue})
	if !isReady(&twice) {
		t.Error("any True Ready condition makes a pod ready")
	}
}

func TestLiveAndStatus(t *testing.T) {
	controller := true
	owned := func(p corev1.Pod) corev1.Pod {
		p.OwnerReferences = []metav1.OwnerReference{{UID: "uid-1", Controller: &controller}}
		return p
	}
	terminating := owned(pod("c", corev1.PodRunning, true, 1))
	now := metav1.Now()
	terminating.DeletionTimestamp = &now
	pods := []corev1.Pod{
		owned(pod("b", corev1.PodRunning, true, 1)),
		owned(pod("a", corev1.PodPending, false, 1)),
		owned(pod("f", corev1.PodFailed, false, 1)),
		terminating,
		pod("other", corev1.PodRunning, true, 1),
	}
	live := livePods(pods, "uid-1")
	jz := &Jinghzhu{ObjectMeta: metav1.ObjectMeta{Generation: 4}, Spec: JinghzhuSpec{Desired: 2}}
	status := observedStatus(jz, live, decide(2, len(live), countReady(live)).message)
	if status.Current != 2 || !reflect.DeepEqual(status.PodList, []string{"a", "b"}) ||
		status.State != statePending || status.Message != "2/2 pods, 1/2 ready" ||
		*status.ObservedGeneration != 4 || status.ReadyReplicas != nil {
		t.Fatalf("status %+v", status)
	}
	stored := status
	stored.PodList = []string{"b", "a"}
	if !statusEqual(&stored, status) {
		t.Fatal("pod order must not matter")
	}
	ready := int64(7)
	stored.ReadyReplicas = &ready
	if !statusEqual(&stored, status) {
		t.Fatal("readyReplicas is not the plugin's to compare")
	}
	stored.Message = "x"
	if statusEqual(&stored, status) || statusEqual(nil, status) {
		t.Fatal("a different or missing status must differ")
	}
	if statusProposal(&status, status) != nil || statusProposal(nil, status) == nil {
		t.Fatal("a proposal only when the status changed")
	}
}

// The cases of the host's observed::the_host_adds_ready_replicas_to_what_is_written.
func TestStatusToWrite(t *testing.T) {
	zero, one := int64(0), int64(1)
	stored := &JinghzhuStatus{Current: 2, State: statePending, ReadyReplicas: &zero}
	proposed := &JinghzhuStatus{Current: 2, State: stateRunning}

	written := statusToWrite(stored, proposed, 1)
	if written.State != stateRunning || *written.ReadyReplicas != 1 || proposed.ReadyReplicas != nil {
		t.Fatalf("a proposal is written with the host's count: %+v", written)
	}
	if written.PodList == nil {
		t.Fatal("podList is written as [], never null")
	}
	refreshed := statusToWrite(stored, nil, 1)
	if refreshed.State != statePending || *refreshed.ReadyReplicas != 1 || *stored.ReadyReplicas != 0 {
		t.Fatalf("no proposal: the stored status with the count brought up to date: %+v", refreshed)
	}
	if statusIdentical(stored, refreshed) {
		t.Fatal("a changed count is a write")
	}
	if statusToWrite(nil, nil, 1) != nil {
		t.Fatal("nothing proposed and nothing stored: nothing to write")
	}
	current := &JinghzhuStatus{Current: 2, State: statePending, ReadyReplicas: &one}
	if got := statusToWrite(current, nil, 1); !statusIdentical(current, got) {
		t.Fatalf("up to date already: no write, got %+v", got)
	}
	// A stored status from before readyReplicas existed gets it written.
	old := &JinghzhuStatus{Current: 1, PodList: []string{"a"}, State: stateRunning}
	if got := statusToWrite(old, nil, 1); statusIdentical(old, got) {
		t.Fatal("a missing readyReplicas is a write")
	}
	// The host's == keeps the pod order; a missing list equals an empty one.
	x := &JinghzhuStatus{PodList: []string{"a", "b"}, ReadyReplicas: &one}
	y := &JinghzhuStatus{PodList: []string{"b", "a"}, ReadyReplicas: &one}
	if statusIdentical(x, y) {
		t.Fatal("order matters to the host's comparison")
	}
	if !statusIdentical(&JinghzhuStatus{}, &JinghzhuStatus{PodList: []string{}}) {
		t.Fatal("nil and empty pod lists are the same")
	}

	// The JSON the host writes: camelCase, readyReplicas 0 is written.
	b, err := json.Marshal(statusToWrite(nil, &JinghzhuStatus{State: stateScaling}, 0))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"current":0,"podList":[],"readyReplicas":0,"state":"Scaling","message":""}`; string(b) != want {
		t.Fatalf("status JSON %s, want %s", b, want)
	}
}

// defaultPodSpec is the host's default_template_spec, field for field (the
// JSON serde writes for it, with Go's empty structs left out).
func TestDefaultPodSpecIsTheHosts(t *testing.T) {
	b, err := json.Marshal(defaultPodSpec)
	if err != nil {
		t.Fatal(err)
	}
	var got any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	got = dropEmpty(got)
	var want any
	const host = `{"automountServiceAccountToken":false,"containers":[{"image":"registry.k8s.io/pause:3.10","name":"app",` +
		`"securityContext":{"allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"]},"readOnlyRootFilesystem":true}}],` +
		`"securityContext":{"runAsGroup":65535,"runAsNonRoot":true,"runAsUser":65535,"seccompProfile":{"type":"RuntimeDefault"}}}`
	if err := json.Unmarshal([]byte(host), &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("default pod spec %v\nwant %v", got, want)
	}
}

// dropEmpty removes empty objects from decoded JSON, recursively.
func dropEmpty(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			e = dropEmpty(e)
			if m, ok := e.(map[string]any); ok && len(m) == 0 {
				delete(x, k)
				continue
			}
			x[k] = e
		}
	case []any:
		for i := range x {
			x[i] = dropEmpty(x[i])
		}
	}
	return v
}
