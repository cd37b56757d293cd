// The Memcached decisions, mirrored from examples/memcached/plugin (the
// logic the Wasm host runs as a 0.3 plugin) so that the benchmark's two
// controllers do the same work: the spec read and checked, the desired
// Deployment (same name, labels, replicas, selector and pod template), the
// names of its pods, the status and whether it differs from the stored one,
// the Created/Scaled Event; plus what the host adds itself
// (host/src/declared): the controller owner reference, and an apply skipped
// when the live Deployment already has every desired field.
package main

import (
	"encoding/json"
	"fmt"
	"sort"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
)

const (
	// image is the memcached image the Operator SDK tutorial runs.
	image = "memcached:1.6.26-alpine"
	// appName is app.kubernetes.io/name of the Deployment and its pods.
	appName = "memcached"
	// managedBy is app.kubernetes.io/managed-by of the Deployment.
	managedBy = "memcached-peer"
	// runAsUser is the non-root user memcached runs as.
	runAsUser int64 = 1001
	// maxSize is the largest spec.size (the CRD's maximum).
	maxSize = 100
	// defaultContainerPort is spec.containerPort when absent.
	defaultContainerPort = 11211

	nameLabel      = "app.kubernetes.io/name"
	instanceLabel  = "app.kubernetes.io/instance"
	managedByLabel = "app.kubernetes.io/managed-by"
)

// checkedSpec is what the reconcile reads from a Memcached's spec.
type checkedSpec struct {
	size int32
	port int32
}

// readSpec checks spec.size and spec.containerPort, with a message that
// says what to fix (the plugin's spec::read_spec).
func readSpec(spec MemcachedSpec) (checkedSpec, error) {
	if spec.Size == nil {
		return checkedSpec{}, fmt.Errorf("spec.size is missing: set it to an integer from 0 to %d", maxSize)
	}
	size := *spec.Size
	if size < 0 || size > maxSize {
		return checkedSpec{}, fmt.Errorf("spec.size must be an integer from 0 to %d, got %d: change spec.size", maxSize, size)
	}
	port := int32(defaultContainerPort)
	if spec.ContainerPort != nil {
		port = *spec.ContainerPort
	}
	if port < 1 || port > 65535 {
		return checkedSpec{}, fmt.Errorf("spec.containerPort must be an integer from 1 to 65535, got %d: change spec.containerPort", port)
	}
	return checkedSpec{size: size, port: port}, nil
}

// selectorLabels select the pods of the Memcached instance.
func selectorLabels(instance string) map[string]string {
	return map[string]string{nameLabel: appName, instanceLabel: instance}
}

// desiredDeployment is the Deployment the Memcached m should own, as an
// apply configuration: the plugin's deployment::desired plus the owner
// reference the host adds.
func desiredDeployment(m *Memcached, spec checkedSpec) *appsv1ac.DeploymentApplyConfiguration {
	labels := selectorLabels(m.Name)
	labels[managedByLabel] = managedBy
	owner := metav1ac.OwnerReference().
		WithAPIVersion(GroupVersion.String()).
		WithKind("Memcached").
		WithName(m.Name).
		WithUID(m.UID).
		WithController(true).
		WithBlockOwnerDeletion(true)
	container := corev1ac.Container().
		WithName("memcached").
		WithImage(image).
		WithImagePullPolicy(corev1.PullAlways).
		WithCommand("memcached", "--memory-limit=64", "-o", "modern", "-v").
		WithPorts(corev1ac.ContainerPort().
			WithContainerPort(spec.port).
			WithName("memcached").
			WithProtocol(corev1.ProtocolTCP)).
		WithSecurityContext(corev1ac.SecurityContext().
			WithRunAsNonRoot(true).
			WithRunAsUser(runAsUser).
			WithAllowPrivilegeEscalation(false).
			WithCapabilities(corev1ac.Capabilities().WithDrop("ALL")))
	podSpec := corev1ac.PodSpec().
		WithSecurityContext(corev1ac.PodSecurityContext().
			WithRunAsNonRoot(true).
			WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault))).
		WithContainers(container)
	return appsv1ac.Deployment(m.Name, m.Namespace).
		WithLabels(labels).
		WithOwnerReferences(owner).
		WithSpec(appsv1ac.DeploymentSpec().
			WithReplicas(spec.size).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(selectorLabels(m.Name))).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(selectorLabels(m.Name)).
				WithSpec(podSpec)))
}

// alreadyApplied: the live Deployment has every field of desired as
// desired (the API server's defaults may add more), so an apply would
// change nothing (the host's declared::apply::already).
func alreadyApplied(live *appsv1.Deployment, desired *appsv1ac.DeploymentApplyConfiguration) bool {
	if live == nil {
		return false
	}
	var have, want any
	if err := roundTrip(live, &have); err != nil {
		return false
	}
	if err := roundTrip(desired, &want); err != nil {
		return false
	}
	// A typed object from the cache has no apiVersion and kind.
	if w, ok := want.(map[string]any); ok {
		delete(w, "apiVersion")
		delete(w, "kind")
	}
	return contains(have, want)
}

func roundTrip(in any, out *any) error {
	raw, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, out)
}

// contains: want ⊆ have: objects by key, arrays element by element (of
// the same length), scalars equal.
func contains(have, want any) bool {
	switch w := want.(type) {
	case map[string]any:
		h, ok := have.(map[string]any)
		if !ok {
			return false
		}
		for key, value := range w {
			got, ok := h[key]
			if !ok || !contains(got, value) {
				return false
			}
		}
		return true
	case []any:
		h, ok := have.([]any)
		if !ok || len(h) != len(w) {
			return false
		}
		for i := range w {
			if !contains(h[i], w[i]) {
				return false
			}
		}
		return true
	default:
		return have == want
	}
}

// podNames are the sorted names of the pods of the Memcached instance
// (by its selector labels) that are not terminating (status::pod_names).
func podNames(pods []metav1.PartialObjectMetadata, instance string) []string {
	names := make([]string, 0, len(pods))
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		if p.Labels[nameLabel] != appName || p.Labels[instanceLabel] != instance {
			continue
		}
		names = append(names, p.Name)
	}
	sort.Strings(names)
	return names
}

// observedStatus is the status the Memcached should have now.
func observedStatus(m *Memcached, owned *appsv1.Deployment, nodes []string) MemcachedStatus {
	var ready int32
	if owned != nil {
		ready = owned.Status.ReadyReplicas
	}
	return MemcachedStatus{Nodes: nodes, ReadyReplicas: ready, ObservedGeneration: m.Generation}
}

// statusChanged: ours says something the stored status does not (an
// absent field counts as its zero value: status::update).
func statusChanged(stored, ours MemcachedStatus) bool {
	if stored.ReadyReplicas != ours.ReadyReplicas || stored.ObservedGeneration != ours.ObservedGeneration {
		return true
	}
	if len(stored.Nodes) != len(ours.Nodes) {
		return true
	}
	for i := range ours.Nodes {
		if stored.Nodes[i] != ours.Nodes[i] {
			return true
		}
	}
	return false
}

// statusPatch is the JSON merge patch that writes ours (nodes always a
// list: `null` would delete the field instead of emptying it).
func statusPatch(ours MemcachedStatus) ([]byte, error) {
	nodes := ours.Nodes
	if nodes == nil {
		nodes = []string{}
	}
	return json.Marshal(map[string]any{"status": map[string]any{
		"nodes":              nodes,
		"readyReplicas":      ours.ReadyReplicas,
		"observedGeneration": ours.ObservedGeneration,
	}})
}

// scaleEvent is the Event of this reconcile, if any: Created when the
// Deployment does not exist yet, Scaled when its replicas (1 when absent,
// the API server's default) differ from spec.size.
func scaleEvent(name string, owned *appsv1.Deployment, size int32) (reason, message string, ok bool) {
	if owned == nil {
		return "Created", fmt.Sprintf("Created Deployment %s with %d replicas", name, size), true
	}
	replicas := int32(1)
	if owned.Spec.Replicas != nil {
		replicas = *owned.Spec.Replicas
	}
	if replicas == size {
		return "", "", false
	}
	return "Scaled", fmt.Sprintf("Deployment %s scaled from %d to %d", name, replicas, size), true
}
