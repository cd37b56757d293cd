package main

import (
	"reflect"
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

func TestMessagesAndStates(t *testing.T) {
	cases := []struct {
		desired int64
		current int
		want    plan
		state   string
	}{
		{3, 2, plan{create: 1, message: "2/3 pods; creating 1"}, stateScaling},
		{1, 3, plan{delete: 2, message: "3/1 pods; deleting 2"}, stateScaling},
		{3, 3, plan{message: "3/3 pods"}, stateRunning},
		{3, 0, plan{create: 3, message: "0/3 pods; creating 3"}, statePending},
		{1000, 0, plan{create: 500, message: "0/1000 pods; creating 500"}, statePending},
	}
	for _, c := range cases {
		if got := decide(c.desired, c.current); got != c.want {
			t.Errorf("decide(%d, %d) = %+v, want %+v", c.desired, c.current, got, c.want)
		}
		if got := state(c.current, c.desired); got != c.state {
			t.Errorf("state(%d, %d) = %s, want %s", c.current, c.desired, got, c.state)
		}
	}
	if got := scalingUpEvent(3); got != "Creating 3 pod(s)" {
		t.Errorf("scaling up: %q", got)
	}
	many := []string{"p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p9", "p10", "p11"}
	if got := scalingDownEvent(many); got != "Deleting 12 pod(s): p0, p1, p2, p3, p4, p5, p6, p7, p8, p9 and 2 more" {
		t.Errorf("scaling down: %q", got)
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
	status := observedStatus(jz, live, decide(2, len(live)).message)
	if status.Current != 2 || !reflect.DeepEqual(status.PodList, []string{"a", "b"}) ||
		status.State != stateRunning || status.Message != "2/2 pods" || *status.ObservedGeneration != 4 {
		t.Fatalf("status %+v", status)
	}
	stored := status
	stored.PodList = []string{"b", "a"}
	if !statusEqual(&stored, status) {
		t.Fatal("pod order must not matter")
	}
	stored.Message = "x"
	if statusEqual(&stored, status) || statusEqual(nil, status) {
		t.Fatal("a different or missing status must differ")
	}
}
