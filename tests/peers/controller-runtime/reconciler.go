// The reconciler: a kubebuilder-style Reconcile that does what the Wasm host
// does with the replicaset plugin, write for write (see host/src/apply):
// creates in slow-start batches and one SuccessfulCreate Event naming the
// pods created, deletes with a UID precondition and one SuccessfulDelete
// Event naming the pods deleted, the status (with the host's readyReplicas)
// patched only when it changed, and the jinghzhu.io/reconciled-by
// annotation patched when it differs. Like the replicaset plugin it records
// no ScalingUp/ScalingDown Event of its own (the SuccessfulCreate and
// SuccessfulDelete name the pods) and logs its "scaling up"/"scaling down"
// line at debug (V(1)).
//
// Like a typical kubebuilder operator it has no expectations: it trusts the
// informer cache, and a cache lagging behind its own creates can lead to an
// extra pod that a later reconcile deletes.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
)

const (
	// managedByLabel and ownerLabel are the labels the host puts on its pods.
	managedByLabel = "app.kubernetes.io/managed-by"
	managedBy      = "wasm-operator"
	ownerLabel     = "jinghzhu.io/owner"
	// reconciledByAnnotation names who reconciled the object last.
	reconciledByAnnotation = "jinghzhu.io/reconciled-by"
	// reconciledBy is this peer's stamp.
	reconciledBy = "replicaset@0.1.0 (controller-runtime peer)"
	// ownerIndex is the field index of pods by their controller's name
	// (the kubebuilder CronJob tutorial's `.metadata.controller`).
	ownerIndex = ".metadata.controller"
	// eventAction is the action of every Event, as the host writes it.
	eventAction = "Reconcile"
	// defaultImage is the image of the default pod (the host's DEFAULT_IMAGE).
	defaultImage = "registry.k8s.io/pause:3.10"
)

// defaultPodSpec is the pod spec without a template, the host's
// default_template_spec (host/src/apply/policy/template.rs): one pause
// container that passes the restricted Pod Security Standard (runAsNonRoot,
// runAsUser/runAsGroup 65535, seccomp RuntimeDefault, drop ALL, no privilege
// escalation, read-only root filesystem) and mounts no service account token.
var defaultPodSpec = corev1.PodSpec{
	AutomountServiceAccountToken: ptrTo(false),
	SecurityContext: &corev1.PodSecurityContext{
		RunAsNonRoot:   ptrTo(true),
		RunAsUser:      ptrTo(int64(65535)),
		RunAsGroup:     ptrTo(int64(65535)),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	},
	Containers: []corev1.Container{{
		Name:  "app",
		Image: defaultImage,
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptrTo(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			ReadOnlyRootFilesystem:   ptrTo(true),
		},
	}},
}

// ptrTo returns a pointer to a copy of v.
func ptrTo[T any](v T) *T { return &v }

// JinghzhuReconciler reconciles Jinghzhus.
type JinghzhuReconciler struct {
	client.Client
	Scheme   *runtime.Scheme
	Recorder recorder.EventRecorder
}

// Reconcile keeps spec.desired live pods and reports them in the status.
func (r *JinghzhuReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	var jz Jinghzhu
	if err := r.Get(ctx, req.NamespacedName, &jz); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if jz.DeletionTimestamp != nil {
		// The garbage collector deletes its pods through their ownerReferences.
		return ctrl.Result{}, nil
	}

	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(jz.Namespace),
		client.MatchingFields{ownerIndex: jz.Name}); err != nil {
		return ctrl.Result{}, err
	}
	uid := string(jz.UID)
	live := livePods(pods.Items, uid)
	decision := decide(jz.Spec.Desired, len(live), countReady(live))
	// What the plugin returns: its status only when it differs from the stored one.
	proposal := statusProposal(jz.Status, observedStatus(&jz, live, decision.message))
	logger.V(1).Info("reconcile", "desired", jz.Spec.Desired, "live", len(live))

	if decision.create > 0 {
		if err := r.createPods(ctx, &jz, decision.create); err != nil {
			return ctrl.Result{}, err
		}
		logger.V(1).Info("scaling up", "live", len(live), "desired", jz.Spec.Desired, "creating", decision.create)
	}
	if decision.delete > 0 {
		names := pickForDeletion(live, decision.delete)
		if err := r.deletePods(ctx, &jz, live, names); err != nil {
			return ctrl.Result{}, err
		}
		logger.V(1).Info("scaling down", "live", len(live), "desired", jz.Spec.Desired, "deleting", names)
	}

	// The proposal (or, without one, the stored status) with the host's
	// readyReplicas, written only when it differs from the stored status.
	if status := statusToWrite(jz.Status, proposal, readyReplicas(pods.Items, uid)); status != nil &&
		!statusIdentical(jz.Status, status) {
		patch, err := json.Marshal(map[string]any{"status": status})
		if err != nil {
			return ctrl.Result{}, err
		}
		if err := r.Status().Patch(ctx, &jz, client.RawPatch(types.MergePatchType, patch)); err != nil {
			return ctrl.Result{}, fmt.Errorf("patching the status of %s: %w", req.NamespacedName, err)
		}
	}
	if jz.Annotations[reconciledByAnnotation] != reconciledBy {
		patch, err := json.Marshal(map[string]any{
			"metadata": map[string]any{"annotations": map[string]string{reconciledByAnnotation: reconciledBy}},
		})
		if err != nil {
			return ctrl.Result{}, err
		}
		if err := r.Patch(ctx, &jz, client.RawPatch(types.MergePatchType, patch)); err != nil {
			return ctrl.Result{}, fmt.Errorf("annotating %s: %w", req.NamespacedName, err)
		}
	}
	return ctrl.Result{}, nil
}

// event records an Event on the Jinghzhu (in the background, as client-go does).
func (r *JinghzhuReconciler) event(jz *Jinghzhu, eventType, reason, note string) {
	r.Recorder.Eventf(jz, nil, eventType, reason, eventAction, "%s", truncateNote(note))
}

// newPod builds one pod of jz from its template (or the pause pod).
func (r *JinghzhuReconciler) newPod(jz *Jinghzhu) (*corev1.Pod, error) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: jz.Name + "-",
			Namespace:    jz.Namespace,
			Labels:       map[string]string{},
		},
		Spec: *defaultPodSpec.DeepCopy(),
	}
	if t := jz.Spec.Template; t != nil {
		for k, v := range t.Labels {
			pod.Labels[k] = v
		}
		if len(t.Annotations) > 0 {
			pod.Annotations = make(map[string]string, len(t.Annotations))
			for k, v := range t.Annotations {
				pod.Annotations[k] = v
			}
		}
		if len(t.Spec.Containers) > 0 {
			pod.Spec = *t.Spec.DeepCopy()
		}
	}
	// The operator's labels win over the template's.
	pod.Labels[managedByLabel] = managedBy
	pod.Labels[ownerLabel] = jz.Name
	if err := controllerutil.SetControllerReference(jz, pod, r.Scheme); err != nil {
		return nil, err
	}
	return pod, nil
}

// createPods creates count pods in slow-start batches (1, 2, 4, ...), each
// batch in parallel; the first failed batch stops the rest. One
// SuccessfulCreate Event names the pods created, then a FailedCreate Event
// reports a failure, as the host does.
func (r *JinghzhuReconciler) createPods(ctx context.Context, jz *Jinghzhu, count int) error {
	var names []string
	var failure error
	remaining := count
	for batch := 1; remaining > 0 && failure == nil; batch *= 2 {
		n := min(batch, remaining)
		remaining -= n
		created := make([]*corev1.Pod, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			pod, err := r.newPod(jz)
			if err != nil {
				return err
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := r.Create(ctx, pod); err != nil {
					errs[i] = err
					return
				}
				created[i] = pod
			}()
		}
		wg.Wait()
		for i := range n {
			if errs[i] != nil {
				failure = errs[i]
				continue
			}
			names = append(names, created[i].Name)
		}
	}
	if len(names) > 0 {
		r.event(jz, corev1.EventTypeNormal, "SuccessfulCreate", createdEvent(names))
	}
	if failure != nil {
		r.event(jz, corev1.EventTypeWarning, "FailedCreate", "Error creating pod: "+failure.Error())
		return fmt.Errorf("creating pods in %s: %w", jz.Namespace, failure)
	}
	return nil
}

// deletePods deletes the named live pods, each guarded by the UID it had,
// one after another; the first failure stops the rest. One SuccessfulDelete
// Event names the pods deleted, then a FailedDelete Event reports a failure,
// as the host does.
func (r *JinghzhuReconciler) deletePods(ctx context.Context, jz *Jinghzhu, live []*corev1.Pod, names []string) error {
	byName := make(map[string]*corev1.Pod, len(live))
	for _, p := range live {
		byName[p.Name] = p
	}
	var deleted []string
	var failed string
	var failure error
	for _, name := range names {
		pod, ok := byName[name]
		if !ok {
			continue
		}
		err := r.Delete(ctx, pod, client.Preconditions{UID: &pod.UID})
		// Already gone, or replaced by another pod of the same name: fine.
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			failed, failure = name, err
			break
		}
		deleted = append(deleted, name)
	}
	if len(deleted) > 0 {
		r.event(jz, corev1.EventTypeNormal, "SuccessfulDelete", deletedEvent(deleted))
	}
	if failure != nil {
		r.event(jz, corev1.EventTypeWarning, "FailedDelete", fmt.Sprintf("Error deleting pod %s: %v", failed, failure))
		return fmt.Errorf("deleting pod %s/%s: %w", jz.Namespace, failed, failure)
	}
	return nil
}
