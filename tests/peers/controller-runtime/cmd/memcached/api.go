// The Memcached custom resource (cache.example.com/v1alpha1) as typed Go
// structs, the way kubebuilder lays out an API package: spec, status, list
// type, DeepCopy methods (written out, no controller-gen) and the scheme
// registration. The CRD is examples/memcached/crd.yaml; these structs read
// and write the same JSON.
package main

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of Memcached.
var GroupVersion = schema.GroupVersion{Group: "cache.example.com", Version: "v1alpha1"}

// MemcachedSpec asks for a memcached Deployment of Size replicas.
type MemcachedSpec struct {
	// Size is the replicas of the Deployment (0 to 100). A pointer: a
	// missing size is an invalid spec, not a size of 0.
	Size *int32 `json:"size,omitempty"`
	// ContainerPort is the port memcached listens on (default 11211).
	ContainerPort *int32 `json:"containerPort,omitempty"`
}

// MemcachedStatus is what the operator observed.
type MemcachedStatus struct {
	// Nodes names the memcached pods that are not terminating, sorted.
	Nodes []string `json:"nodes,omitempty"`
	// ReadyReplicas is the Deployment's status.readyReplicas.
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
	// ObservedGeneration is the metadata.generation this status describes.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// Memcached is a memcached cluster of spec.size replicas.
type Memcached struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   MemcachedSpec   `json:"spec,omitempty"`
	Status MemcachedStatus `json:"status,omitempty"`
}

// MemcachedList is a list of Memcacheds.
type MemcachedList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Memcached `json:"items"`
}

// DeepCopyInto copies the Memcached into out.
func (in *Memcached) DeepCopyInto(out *Memcached) {
	*out = *in
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if in.Spec.Size != nil {
		s := *in.Spec.Size
		out.Spec.Size = &s
	}
	if in.Spec.ContainerPort != nil {
		p := *in.Spec.ContainerPort
		out.Spec.ContainerPort = &p
	}
	if in.Status.Nodes != nil {
		out.Status.Nodes = append([]string(nil), in.Status.Nodes...)
	}
}

// DeepCopy returns a copy.
func (in *Memcached) DeepCopy() *Memcached {
	if in == nil {
		return nil
	}
	out := new(Memcached)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *Memcached) DeepCopyObject() runtime.Object { return in.DeepCopy() }

// DeepCopyInto copies the list into out.
func (in *MemcachedList) DeepCopyInto(out *MemcachedList) {
	*out = *in
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]Memcached, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
}

// DeepCopyObject implements runtime.Object.
func (in *MemcachedList) DeepCopyObject() runtime.Object {
	if in == nil {
		return nil
	}
	out := new(MemcachedList)
	in.DeepCopyInto(out)
	return out
}

// AddToScheme registers Memcached and MemcachedList.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &Memcached{}, &MemcachedList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
