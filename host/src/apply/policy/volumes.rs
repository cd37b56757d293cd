//! What kind of volume a pod spec names: the one fact about volumes both the
//! PSS profiles ([`super::pss`]) and the host rules ([`super::host_rules`])
//! check, kept below both so neither imports the other for it.

use k8s_openapi::api::core::v1::Volume;

/// The JSON name of the source of `v` (`emptyDir` when none is set, as the
/// API server defaults it).
pub fn volume_kind(v: &Volume) -> &'static str {
    // Destructured so that a new volume source in k8s-openapi fails to compile here.
    let Volume {
        name: _,
        aws_elastic_block_store,
        azure_disk,
        azure_file,
        cephfs,
        cinder,
        config_map,
        csi,
        downward_api,
        empty_dir,
        ephemeral,
        fc,
        flex_volume,
        flocker,
        gce_persistent_disk,
        git_repo,
        glusterfs,
        host_path,
        image,
        iscsi,
        nfs,
        persistent_volume_claim,
        photon_persistent_disk,
        portworx_volume,
        projected,
        quobyte,
        rbd,
        scale_io,
        secret,
        storageos,
        vsphere_volume,
    } = v;
    let kinds = [
        ("awsElasticBlockStore", aws_elastic_block_store.is_some()),
        ("azureDisk", azure_disk.is_some()),
        ("azureFile", azure_file.is_some()),
        ("cephfs", cephfs.is_some()),
        ("cinder", cinder.is_some()),
        ("configMap", config_map.is_some()),
        ("csi", csi.is_some()),
        ("downwardAPI", downward_api.is_some()),
        ("emptyDir", empty_dir.is_some()),
        ("ephemeral", ephemeral.is_some()),
        ("fc", fc.is_some()),
        ("flexVolume", flex_volume.is_some()),
        ("flocker", flocker.is_some()),
        ("gcePersistentDisk", gce_persistent_disk.is_some()),
        ("gitRepo", git_repo.is_some()),
        ("glusterfs", glusterfs.is_some()),
        ("hostPath", host_path.is_some()),
        ("image", image.is_some()),
        ("iscsi", iscsi.is_some()),
        ("nfs", nfs.is_some()),
        ("persistentVolumeClaim", persistent_volume_claim.is_some()),
        ("photonPersistentDisk", photon_persistent_disk.is_some()),
        ("portworxVolume", portworx_volume.is_some()),
        ("projected", projected.is_some()),
        ("quobyte", quobyte.is_some()),
        ("rbd", rbd.is_some()),
        ("scaleIO", scale_io.is_some()),
        ("secret", secret.is_some()),
        ("storageos", storageos.is_some()),
        ("vsphereVolume", vsphere_volume.is_some()),
    ];
    kinds
        .iter()
        .find(|(_, set)| *set)
        .map_or("emptyDir", |(kind, _)| kind)
}
