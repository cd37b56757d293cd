//! Field-by-field comparison of a view with owned records, through the
//! view's accessors (not through [`super::InputView::owned`]): what tests
//! use to show that a view reads exactly what the owned decoding produces.
//! Exposed as [`crate::testing::compare_view`].

use super::{InputView, MetaView, Pairs, PodView, StatusView, TemplateView};
use crate::types as m;

/// `Err` naming the first field where `$view` and `$owned` differ.
macro_rules! same {
    ($what:expr, $view:expr, $owned:expr) => {
        if $view != $owned {
            return Err(format!(
                "{}: the view reads {:?}, the owned record holds {:?}",
                $what, $view, $owned
            ));
        }
    };
}

/// `Ok` when every field `view` reads equals the field of `owned`; else
/// which field differs and how.
pub fn compare(view: &InputView<'_>, owned: &m::ReconcileInput) -> Result<(), String> {
    let jz = view.jinghzhu();
    let o = &owned.jinghzhu;
    meta("jinghzhu", jz.metadata(), &o.metadata)?;
    same!("jinghzhu desired", jz.desired(), o.spec.desired);
    match (jz.template(), &o.spec.template) {
        (Some(v), Some(t)) => template(v, t)?,
        (None, None) => {}
        (v, t) => same!("jinghzhu template present", v.is_some(), t.is_some()),
    }
    match (jz.status(), &o.status) {
        (Some(v), Some(s)) => status(v, s)?,
        (None, None) => {}
        (v, s) => same!("jinghzhu status present", v.is_some(), s.is_some()),
    }
    same!("pod count", view.pods().len(), owned.pods.len());
    for (i, (v, p)) in view.pods().iter().zip(&owned.pods).enumerate() {
        pod(i, v, p)?;
    }
    same!("now", view.now(), owned.now);
    Ok(())
}

fn pod(i: usize, v: PodView<'_>, p: &m::Pod) -> Result<(), String> {
    meta(&format!("pod {i}"), v.metadata(), &p.metadata)?;
    same!(format!("pod {i} phase"), v.phase(), p.phase);
    same!(format!("pod {i} ready"), v.ready(), p.ready);
    Ok(())
}

fn meta(whose: &str, v: MetaView<'_>, o: &m::ObjectMeta) -> Result<(), String> {
    same!(format!("{whose} name"), v.name(), o.name.as_str());
    same!(
        format!("{whose} namespace"),
        v.namespace(),
        o.namespace.as_str()
    );
    same!(format!("{whose} uid"), v.uid(), o.uid.as_str());
    same!(
        format!("{whose} resource version"),
        v.resource_version(),
        o.resource_version.as_str()
    );
    same!(format!("{whose} generation"), v.generation(), o.generation);
    pairs(&format!("{whose} labels"), v.labels(), &o.labels)?;
    pairs(
        &format!("{whose} annotations"),
        v.annotations(),
        &o.annotations,
    )?;
    same!(
        format!("{whose} creation"),
        v.creation_timestamp(),
        o.creation_timestamp
    );
    same!(
        format!("{whose} deletion"),
        v.deletion_timestamp(),
        o.deletion_timestamp
    );
    let owners = v.owner_references();
    same!(
        format!("{whose} owners"),
        owners.len(),
        o.owner_references.len()
    );
    for (i, (r, x)) in owners.iter().zip(&o.owner_references).enumerate() {
        let at = format!("{whose} owner {i}");
        same!(
            format!("{at} api version"),
            r.api_version(),
            x.api_version.as_str()
        );
        same!(format!("{at} kind"), r.kind(), x.kind.as_str());
        same!(format!("{at} name"), r.name(), x.name.as_str());
        same!(format!("{at} uid"), r.uid(), x.uid.as_str());
        same!(format!("{at} controller"), r.controller(), x.controller);
    }
    Ok(())
}

fn pairs(whose: &str, v: Pairs<'_>, o: &[m::KeyValue]) -> Result<(), String> {
    same!(format!("{whose} count"), v.len(), o.len());
    for (i, ((key, value), kv)) in v.iter().zip(o).enumerate() {
        same!(format!("{whose} {i} key"), key, kv.key.as_str());
        same!(format!("{whose} {i} value"), value, kv.value.as_str());
        same!(
            format!("{whose} value of {key:?}"),
            v.value(key),
            crate::kv::get(o, key)
        );
    }
    Ok(())
}

fn template(v: TemplateView<'_>, t: &m::PodTemplate) -> Result<(), String> {
    pairs("template labels", v.labels(), &t.labels)?;
    pairs("template annotations", v.annotations(), &t.annotations)?;
    same!("template spec", v.spec_json(), t.spec_json.as_str());
    Ok(())
}

fn status(v: StatusView<'_>, s: &m::JinghzhuStatus) -> Result<(), String> {
    same!("status current", v.current(), s.current);
    same!("status pod count", v.pod_list().len(), s.pod_list.len());
    for (i, (name, n)) in v.pod_list().iter().zip(&s.pod_list).enumerate() {
        same!(format!("status pod {i}"), name, n.as_str());
    }
    same!("status state", v.state(), s.state.as_str());
    same!("status message", v.message(), s.message.as_str());
    same!(
        "status observed generation",
        v.observed_generation(),
        s.observed_generation
    );
    same!("status same_as", v.same_as(s), true);
    Ok(())
}
