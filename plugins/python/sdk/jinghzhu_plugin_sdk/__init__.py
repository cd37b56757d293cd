"""SDK for wasm-operator reconcile plugins in Python (contract
``jinghzhu:operator@0.2.0``, built with componentize-py).

* :mod:`.input`: friendly views of the input (``input.jinghzhu``, ``input.pods``, ``input.now``);
* :mod:`.output`: :class:`Output`, :class:`PodCreate`, :class:`Event`, :class:`ReconcileError`;
* :mod:`.pod`, :mod:`.status`, :mod:`.kv`, :mod:`.time`: the helpers of the Rust SDK;
* :mod:`.log`: structured logging to the host (captured natively);
* :mod:`.plugin`: ``Reconciler = plugin.reconciler(name, version, reconcile)``;
* :mod:`.testing` and :mod:`.fixtures`: native builders and the golden-fixture runner.
"""

from . import kv, log, pod, status, time  # noqa: F401
from ._wit import RECONCILER_INTERFACE, WIT_PACKAGE  # noqa: F401
from .input import Input, Jinghzhu, ObjectMeta, OwnerReference, Pod, PodPhase, PodTemplate, Status, Timestamp  # noqa: F401
from .output import Event, EventType, Output, PodCreate, ReconcileError, empty_output  # noqa: F401
