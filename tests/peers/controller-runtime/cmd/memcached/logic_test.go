package main

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func ptr[T any](v T) *T { return &v }

func memcached(size int32) *Memcached {
	return &Memcached{
		ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "ns", UID: "uid-1", Generation: 2},
		Spec:       MemcachedSpec{Size: ptr(size)},
	}
}

// The cases of the plugin's spec tests: size required and bounded, the port defaulted.
func TestReadSpec(t *testing.T) {
	spec, err := readSpec(MemcachedSpec{Size: ptr(int32(3))})
	if err != nil || spec != (checkedSpec{size: 3, port: 11211}) {
		t.Fatalf("got %+v, %v", spec, err)
	}
	if _, err := readSpec(MemcachedSpec{}); err == nil || !strings.Contains(err.Error(), "spec.size is missing") {
		t.Fatalf("missing size: %v", err)
	}
	if _, err := readSpec(MemcachedSpec{Size: ptr(int32(101))}); err == nil || !strings.Contains(err.Error(), "change spec.size") {
		t.Fatalf("size 101: %v", err)
	}
	if _, err := readSpec(MemcachedSpec{Size: ptr(int32(1)), ContainerPort: ptr(int32(0))}); err == nil {
		t.Fatal("port 0 accepted")
	}
}

// The Deployment is the plugin's (deployment::desired) plus the host's owner reference.
func TestDesiredDeploymentIsThePlugins(t *testing.T) {
	raw, err := json.Marshal(desiredDeployment(memcached(3), checkedSpec{size: 3, port: 11211}))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{}
	if err := json.Unmarshal([]byte(`{
	  "kind": "Deployment", "apiVersion": "apps/v1",
	  "metadata": {"name": "m", "namespace": "ns",
	    "labels": {"app.kubernetes.io/name": "memcached", "app.kubernetes.io/instance": "m", "app.kubernetes.io/managed-by": "memcached-peer"},
	    "ownerReferences": [{"apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached", "name": "m", "uid": "uid-1", "controller": true, "blockOwnerDeletion": true}]},
	  "spec": {"replicas": 3,
	    "selector": {"matchLabels": {"app.kubernetes.io/name": "memcached", "app.kubernetes.io/instance": "m"}},
	    "template": {"metadata": {"labels": {"app.kubernetes.io/name": "memcached", "app.kubernetes.io/instance": "m"}},
	      "spec": {"securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
	        "containers": [{"name": "memcached", "image": "memcached:1.6.26-alpine", "imagePullPolicy": "Always",
	          "command": ["memcached", "--memory-limit=64", "-o", "modern", "-v"],
	          "ports": [{"containerPort": 11211, "name": "memcached", "protocol": "TCP"}],
	          "securityContext": {"runAsNonRoot": true, "runAsUser": 1001, "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]}}}}`), &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("desired Deployment\n got %s", raw)
	}
}

// A live Deployment with the server's defaults added is already applied;
// another replica count is not (the host's apply::tests).
func TestAlreadyAppliedIgnoresServerDefaults(t *testing.T) {
	m := memcached(3)
	desired := desiredDeployment(m, checkedSpec{size: 3, port: 11211})
	var live appsv1.Deployment
	raw, err := json.Marshal(desired)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &live); err != nil {
		t.Fatal(err)
	}
	live.TypeMeta = metav1.TypeMeta{}
	live.ResourceVersion = "7"
	live.Spec.RevisionHistoryLimit = ptr(int32(10))
	live.Spec.Template.Spec.Containers[0].TerminationMessagePath = "/dev/termination-log"
	live.Status.ReadyReplicas = 3
	if !alreadyApplied(&live, desired) {
		t.Fatal("defaults counted as a change")
	}
	if alreadyApplied(nil, desired) {
		t.Fatal("an absent Deployment counted as applied")
	}
	scaled := desiredDeployment(m, checkedSpec{size: 4, port: 11211})
	if alreadyApplied(&live, scaled) {
		t.Fatal("a new size counted as applied")
	}
	live.Spec.Template.Spec.Containers = append(live.Spec.Template.Spec.Containers, corev1.Container{Name: "extra"})
	if alreadyApplied(&live, desired) {
		t.Fatal("a second container counted as applied")
	}
}

// status::pod_names: the instance's pods, not terminating, sorted.
func TestPodNames(t *testing.T) {
	pod := func(name, instance string, terminating bool) metav1.PartialObjectMetadata {
		p := metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: selectorLabels(instance)}}
		if terminating {
			p.DeletionTimestamp = &metav1.Time{}
		}
		return p
	}
	pods := []metav1.PartialObjectMetadata{pod("m-b", "m", false), pod("m-a", "m", false), pod("m-c", "m", true), pod("o-a", "o", false)}
	if got := podNames(pods, "m"); !reflect.DeepEqual(got, []string{"m-a", "m-b"}) {
		t.Fatalf("names %v", got)
	}
	if got := podNames(nil, "m"); len(got) != 0 {
		t.Fatalf("no pods: %v", got)
	}
}

// status::update: unchanged status is not written; absent fields count as zero.
func TestStatusChanged(t *testing.T) {
	m := memcached(1)
	d := &appsv1.Deployment{Status: appsv1.DeploymentStatus{ReadyReplicas: 1}}
	ours := observedStatus(m, d, []string{"m-a"})
	if !reflect.DeepEqual(ours, MemcachedStatus{Nodes: []string{"m-a"}, ReadyReplicas: 1, ObservedGeneration: 2}) {
		t.Fatalf("status %+v", ours)
	}
	if !statusChanged(MemcachedStatus{}, ours) {
		t.Fatal("a first status not written")
	}
	if statusChanged(ours, observedStatus(m, d, []string{"m-a"})) {
		t.Fatal("the same status written again")
	}
	empty := observedStatus(m, nil, []string{})
	if statusChanged(MemcachedStatus{ObservedGeneration: 2}, empty) {
		t.Fatal("absent nodes and readyReplicas count as their zero values")
	}
	if !statusChanged(ours, observedStatus(m, d, []string{"m-b"})) {
		t.Fatal("another pod not written")
	}
	patch, err := statusPatch(empty)
	if err != nil || string(patch) != `{"status":{"nodes":[],"observedGeneration":2,"readyReplicas":0}}` {
		t.Fatalf("patch %s, %v", patch, err)
	}
}

// reconcile::scale_event: Created, Scaled (replicas default 1), or nothing.
func TestScaleEvent(t *testing.T) {
	if reason, msg, ok := scaleEvent("m", nil, 3); !ok || reason != "Created" || msg != "Created Deployment m with 3 replicas" {
		t.Fatalf("created: %s %s", reason, msg)
	}
	d := &appsv1.Deployment{}
	if reason, msg, ok := scaleEvent("m", d, 5); !ok || reason != "Scaled" || msg != "Deployment m scaled from 1 to 5" {
		t.Fatalf("scaled: %s %s", reason, msg)
	}
	d.Spec.Replicas = ptr(int32(5))
	if _, _, ok := scaleEvent("m", d, 5); ok {
		t.Fatal("an Event without a change")
	}
}

// Pods wake the Memcached of their instance label; Deployments are indexed by their Memcached.
func TestMapsAndIndex(t *testing.T) {
	pod := podMetadata()
	pod.Namespace, pod.Labels = "ns", selectorLabels("m")
	if got := memcachedOfPod(context.Background(), pod); len(got) != 1 || got[0].Name != "m" || got[0].Namespace != "ns" {
		t.Fatalf("requests %v", got)
	}
	if got := memcachedOfPod(context.Background(), podMetadata()); got != nil {
		t.Fatalf("an unlabelled pod woke %v", got)
	}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{
		{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "x", Controller: ptr(true)},
		{APIVersion: "cache.example.com/v1alpha1", Kind: "Memcached", Name: "m", Controller: ptr(true)},
	}}}
	if got := indexByController(d); !reflect.DeepEqual(got, []string{"m"}) {
		t.Fatalf("index %v", got)
	}
}
