// The reconciler: a kubebuilder-style Reconcile that does what the Wasm
// host does with the memcached plugin, write for write (host/src/declared):
// the Deployment server-side applied under its own field manager (skipped
// when the cached one already has every desired field), any other
// Deployment the Memcached controls deleted with a UID precondition, the
// status patched only when it changed, a Created or Scaled Event.
package main

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
)

const (
	// fieldManager owns the applied Deployments' fields.
	fieldManager = "memcached-peer"
	// ownerIndex indexes Deployments by the name of their Memcached controller.
	ownerIndex = ".metadata.controller"
	// eventAction is the action of every Event, as the host writes it.
	eventAction = "Reconcile"
)

// MemcachedReconciler reconciles Memcacheds.
type MemcachedReconciler struct {
	client.Client
	Recorder recorder.EventRecorder
}

// Reconcile keeps a Deployment of spec.size replicas and reports its pods.
func (r *MemcachedReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var m Memcached
	if err := r.Get(ctx, req.NamespacedName, &m); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if m.DeletionTimestamp != nil {
		// The garbage collector deletes its Deployment through the owner reference.
		return ctrl.Result{}, nil
	}
	spec, err := readSpec(m.Spec)
	if err != nil {
		// Retrying cannot fix a spec: wait for it to change.
		r.Recorder.Eventf(&m, nil, corev1.EventTypeWarning, "InvalidSpec", eventAction,
			"Memcached %s/%s: %v", m.Namespace, m.Name, err)
		log.FromContext(ctx).Info("invalid spec", "error", err.Error())
		return ctrl.Result{}, nil
	}
	owned, strays, err := r.ownedDeployments(ctx, &m)
	if err != nil {
		return ctrl.Result{}, err
	}
	desired := desiredDeployment(&m, spec)
	if !alreadyApplied(owned, desired) {
		if err := r.Apply(ctx, desired, client.FieldOwner(fieldManager), client.ForceOwnership); err != nil {
			return ctrl.Result{}, fmt.Errorf("applying Deployment %s: %w", req.NamespacedName, err)
		}
	}
	for i := range strays {
		stray := &strays[i]
		err := r.Delete(ctx, stray, client.Preconditions{UID: &stray.UID}, client.PropagationPolicy(metav1.DeletePropagationBackground))
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return ctrl.Result{}, fmt.Errorf("deleting Deployment %s/%s: %w", stray.Namespace, stray.Name, err)
		}
	}
	nodes, err := r.podNames(ctx, &m)
	if err != nil {
		return ctrl.Result{}, err
	}
	if status := observedStatus(&m, owned, nodes); statusChanged(m.Status, status) {
		patch, err := statusPatch(status)
		if err != nil {
			return ctrl.Result{}, err
		}
		if err := r.Status().Patch(ctx, &m, client.RawPatch(types.MergePatchType, patch)); err != nil {
			return ctrl.Result{}, fmt.Errorf("patching the status of %s: %w", req.NamespacedName, err)
		}
	}
	if reason, message, ok := scaleEvent(m.Name, owned, spec.size); ok {
		r.Recorder.Eventf(&m, nil, corev1.EventTypeNormal, reason, eventAction, "%s", message)
	}
	return ctrl.Result{}, nil
}

// ownedDeployments are the Deployment of m's name it controls (nil if
// none) and the others it controls.
func (r *MemcachedReconciler) ownedDeployments(ctx context.Context, m *Memcached) (*appsv1.Deployment, []appsv1.Deployment, error) {
	var list appsv1.DeploymentList
	if err := r.List(ctx, &list, client.InNamespace(m.Namespace), client.MatchingFields{ownerIndex: m.Name}); err != nil {
		return nil, nil, err
	}
	var owned *appsv1.Deployment
	var strays []appsv1.Deployment
	for i := range list.Items {
		d := &list.Items[i]
		if !controlledBy(d.OwnerReferences, m.UID) {
			continue
		}
		if d.Name == m.Name {
			owned = d
		} else {
			strays = append(strays, *d)
		}
	}
	return owned, strays, nil
}

// podNames lists m's pods (metadata only, from the cache) by its selector labels.
func (r *MemcachedReconciler) podNames(ctx context.Context, m *Memcached) ([]string, error) {
	pods := metav1.PartialObjectMetadataList{}
	pods.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	if err := r.List(ctx, &pods, client.InNamespace(m.Namespace), client.MatchingLabels(selectorLabels(m.Name))); err != nil {
		return nil, err
	}
	return podNames(pods.Items, m.Name), nil
}

// controlledBy: one of refs is a controller reference to uid.
func controlledBy(refs []metav1.OwnerReference, uid types.UID) bool {
	for _, ref := range refs {
		if ref.Controller != nil && *ref.Controller && ref.UID == uid {
			return true
		}
	}
	return false
}
