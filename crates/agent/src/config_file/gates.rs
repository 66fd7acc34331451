//! kube-proxy 1.37's feature gates: a gate it does not know is refused, as kube-proxy refuses
//! it (`unrecognized feature gate: X`), and so is a value a gate is locked against. The
//! gates it knows are accepted; only `KubeProxyIPVS` changes what the agent does (false is
//! refused: it turns IPVS mode off), the others are warned about as not acted on.
//!
//! [`GATES`] is what kube-proxy v1.37.2 registers (its own, Kubernetes', component-base's),
//! read from the real program's feature gate registry (`DefaultMutableFeatureGate.GetAll()`
//! in a program that imports `k8s.io/kubernetes/cmd/kube-proxy/app`);
//! `tests/check-flags.sh` checks that every gate the real `--help` lists is accepted here.

/// A gate's stage, as kube-proxy's registry has it at 1.37.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Registered for a later version: cannot be set yet.
    PreAlpha,
    /// Alpha (off by default).
    Alpha,
    /// Beta.
    Beta,
    /// GA: setting it is accepted with a warning; most are locked.
    Ga,
    /// Deprecated: setting it is accepted with a warning.
    Deprecated,
}

/// One gate kube-proxy knows.
#[derive(Debug, Clone, Copy)]
pub struct Gate {
    /// Its name.
    pub name: &'static str,
    /// Its stage.
    pub stage: Stage,
    /// Its default.
    pub default: bool,
    /// Whether it cannot be set to anything but its default.
    pub locked: bool,
}

const fn gate(name: &'static str, stage: Stage, default: bool, locked: bool) -> Gate {
    Gate {
        name,
        stage,
        default,
        locked,
    }
}

/// The gate called `name`, if kube-proxy knows it.
pub fn find(name: &str) -> Option<&'static Gate> {
    GATES.iter().find(|g| g.name == name)
}

/// Why kube-proxy refuses a feature gate's setting; the text is kube-proxy's own message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GateError {
    /// A gate kube-proxy does not register.
    #[error("unrecognized feature gate: {gate}")]
    Unknown {
        /// The gate's name as given.
        gate: String,
    },
    /// A gate locked to its default, set to the other value.
    #[error("cannot set feature gate {gate} to {value}, feature is locked to {}", !value)]
    Locked {
        /// The gate's name.
        gate: String,
        /// The value asked for (the gate is locked to the other one).
        value: bool,
    },
    /// A gate registered for a later version.
    #[error(
        "cannot set feature gate {gate} to {value}, feature is PreAlpha at emulated version 1.37"
    )]
    PreAlpha {
        /// The gate's name.
        gate: String,
        /// The value asked for.
        value: bool,
    },
    /// A `--feature-gates` entry that is not `Gate=bool`.
    #[error("{pair:?}: must be Gate=true|false")]
    Syntax {
        /// The entry as given.
        pair: String,
    },
}

/// Whether kube-proxy would accept `name=on`; the error is kube-proxy's own message.
pub fn check(name: &str, on: bool) -> Result<&'static Gate, GateError> {
    let gate = find(name).ok_or_else(|| GateError::Unknown {
        gate: name.to_string(),
    })?;
    if gate.locked && gate.default != on {
        return Err(GateError::Locked {
            gate: name.to_string(),
            value: on,
        });
    }
    if gate.stage == Stage::PreAlpha {
        return Err(GateError::PreAlpha {
            gate: name.to_string(),
            value: on,
        });
    }
    Ok(gate)
}

use Stage::{Alpha, Beta, Deprecated, Ga};

/// Every gate kube-proxy v1.37.2 registers, sorted by name.
pub const GATES: &[Gate] = &[
    gate("APIResponseCompression", Beta, true, false),
    gate("APIServerIdentity", Beta, true, false),
    gate("APIServerWebhookAuthenticationToken", Alpha, false, false),
    gate("APIServingWithRoutine", Alpha, false, false),
    gate("AggregatedDiscoveryRemoveBetaType", Deprecated, true, true),
    gate("AllAlpha", Alpha, false, false),
    gate("AllBeta", Beta, false, false),
    gate("AllowDNSOnlyNodeCSR", Deprecated, false, false),
    gate(
        "AllowInsecureKubeletCertificateSigningRequests",
        Deprecated,
        false,
        false,
    ),
    gate(
        "AllowOverwriteTerminationGracePeriodSeconds",
        Deprecated,
        false,
        true,
    ),
    gate("AllowParsingUserUIDFromCertAuth", Beta, true, false),
    gate("AllowServiceExternalIPs", Ga, true, false),
    gate("AllowUnsafeMalformedObjectDeletion", Beta, true, false),
    gate("AtomicFIFO", Beta, true, false),
    gate("AtomicWriteVolumeUserFields", Alpha, false, false),
    gate(
        "AuthorizePodWebsocketUpgradeCreatePermission",
        Beta,
        true,
        false,
    ),
    gate("CBORServingAndStorage", Alpha, false, false),
    gate("CPUManagerPolicyAlphaOptions", Alpha, false, false),
    gate("CPUManagerPolicyBetaOptions", Beta, true, false),
    gate("CPUManagerPolicyOptions", Ga, true, true),
    gate("CRDObservedGenerationTracking", Beta, true, false),
    gate("CRDValidationRatcheting", Ga, true, true),
    gate("CRIListStreaming", Alpha, false, false),
    gate("CSIServiceAccountTokenSecrets", Ga, true, true),
    gate("CSIVolumeHealth", Alpha, false, false),
    gate(
        "ChangeContainerStatusOnKubeletRestart",
        Deprecated,
        false,
        false,
    ),
    gate("ClearingNominatedNodeNameAfterBinding", Beta, true, false),
    gate("ClientsAllowCARotation", Beta, true, false),
    gate("ClientsAllowCBOR", Alpha, false, false),
    gate("ClientsAllowTLSCacheGC", Beta, true, false),
    gate("ClientsPreferCBOR", Alpha, false, false),
    gate(
        "CloudControllerManagerWatchBasedRoutesReconciliation",
        Alpha,
        false,
        false,
    ),
    gate("CloudControllerManagerWebhook", Alpha, false, false),
    gate("ClusterTrustBundle", Ga, true, false),
    gate("ClusterTrustBundleProjection", Ga, true, false),
    gate("ComponentFlagz", Beta, true, false),
    gate("ComponentStatusz", Beta, true, false),
    gate("CompositePodGroup", Alpha, false, false),
    gate("ConcurrentWatchObjectDecode", Beta, true, false),
    gate(
        "ConsistentListFromCacheSkipTimeoutFallback",
        Alpha,
        false,
        false,
    ),
    gate("ConstrainedImpersonation", Beta, true, false),
    gate("ContainerCheckpoint", Beta, true, false),
    gate("ContainerRestartRules", Beta, true, false),
    gate("ContainerStopSignals", Alpha, false, false),
    gate("ContextualLogging", Beta, true, false),
    gate(
        "ControllerManagerReleaseLeaderElectionLockOnExit",
        Alpha,
        false,
        false,
    ),
    gate("CoordinatedLeaderElection", Beta, false, false),
    gate("CrossNamespaceVolumeDataSource", Alpha, false, false),
    gate("CustomCPUCFSQuotaPeriod", Ga, true, false),
    gate("CustomResourceFieldSelectors", Ga, true, true),
    gate("DRAAdminAccess", Ga, true, true),
    gate("DRAConsumableCapacity", Beta, true, false),
    gate("DRADerivedAttributes", Alpha, false, false),
    gate("DRADeviceBindingConditions", Beta, true, false),
    gate("DRADeviceCompatibilityGroups", Alpha, false, false),
    gate("DRADeviceTaintRules", Ga, true, false),
    gate("DRADeviceTaints", Ga, true, false),
    gate("DRAExtendedResource", Ga, true, true),
    gate("DRAFractionalCapacityRange", Beta, false, false),
    gate("DRAListTypeAttributes", Alpha, false, false),
    gate("DRANodeAllocatableResources", Alpha, false, false),
    gate("DRAOptionalNodeOperations", Alpha, false, false),
    gate("DRAPartitionableDevices", Beta, true, false),
    gate("DRAPartitionableDevicesType", Alpha, false, false),
    gate("DRAPrioritizedList", Ga, true, true),
    gate("DRAResourceClaimDeviceStatus", Ga, true, true),
    gate(
        "DRAResourceClaimGranularStatusAuthorization",
        Beta,
        true,
        false,
    ),
    gate("DRAResourcePoolStatus", Alpha, false, false),
    gate("DRASchedulerFilterTimeout", Beta, true, false),
    gate("DRAWorkloadResourceClaims", Beta, false, false),
    gate("DeclarativeValidation", Ga, true, true),
    gate("DeclarativeValidationBeta", Beta, true, false),
    gate("DeclarativeValidationTakeover", Deprecated, false, true),
    gate("DefaultPodSysctls", Alpha, false, false),
    gate("DeploymentReplicaSetTerminatingReplicas", Beta, true, false),
    gate("DetectCacheInconsistency", Beta, true, false),
    gate("DisableAllocatorDualWrite", Ga, true, true),
    gate("DisableCPUQuotaWithExclusiveCPUs", Deprecated, true, true),
    gate("DisableNodeKubeProxyVersion", Deprecated, true, true),
    gate("DynamicResourceAllocation", Ga, true, true),
    gate("EmptyDirVolumeMode", Alpha, false, false),
    gate("EnvFiles", Beta, true, false),
    gate("EtcdRangeStream", Beta, true, false),
    gate("EventedPLEG", Alpha, false, false),
    gate("EvictionRequestAPI", Alpha, false, false),
    gate("ExcludeAdmissionWebhookVirtualResources", Beta, true, false),
    gate("ExecProbeTimeout", Ga, true, true),
    gate("ExtendWebSocketsToKubelet", Beta, true, false),
    gate("ExternalServiceAccountTokenSigner", Ga, true, true),
    gate("GRPCContainerProbeTLS", Alpha, false, false),
    gate("GenericWorkload", Beta, false, false),
    gate("GitRepoVolumeDriver", Deprecated, false, true),
    gate("GracefulNodeShutdown", Beta, true, false),
    gate("GracefulNodeShutdownBasedOnPodPriority", Beta, true, false),
    gate("H2CContainerProbe", Alpha, false, false),
    gate("HPAConfigurableTolerance", Ga, true, true),
    gate("HPAGeneration", Beta, true, false),
    gate("HPAOptimizedSelectorStore", Beta, true, false),
    gate("HPAScaleToZero", Beta, true, false),
    gate("HostnameOverride", Ga, true, true),
    gate("HugepageAwareEviction", Beta, true, false),
    gate("ImageMaximumGCAge", Ga, true, true),
    gate("ImageVolume", Ga, true, true),
    gate("ImageVolumeWithDigest", Alpha, false, false),
    gate("InOrderInformers", Ga, true, true),
    gate("InOrderInformersBatchProcess", Beta, true, false),
    gate("InPlacePodLevelResourcesVerticalScaling", Beta, true, false),
    gate("InPlacePodVerticalScaling", Ga, true, true),
    gate(
        "InPlacePodVerticalScalingExclusiveCPUs",
        Alpha,
        false,
        false,
    ),
    gate(
        "InPlacePodVerticalScalingExclusiveMemory",
        Alpha,
        false,
        false,
    ),
    gate("InPlacePodVerticalScalingInitContainers", Ga, true, true),
    gate(
        "InPlacePodVerticalScalingMemoryBackedVolumes",
        Alpha,
        false,
        false,
    ),
    gate(
        "InPlacePodVerticalScalingSchedulerPreemption",
        Alpha,
        false,
        false,
    ),
    gate("InformerResourceVersion", Ga, true, false),
    gate("InterPodAffinityHostnameFastPath", Alpha, false, false),
    gate("JobManagedBy", Ga, true, true),
    gate("KMSv1", Deprecated, false, false),
    gate("KubeProxyIPVS", Deprecated, true, false),
    gate("KubeProxyNFTablesLocalhostNodePorts", Alpha, false, false),
    gate("KubeletAllocatedPodsEndpoint", Alpha, false, false),
    gate("KubeletCgroupDriverFromCRI", Ga, true, true),
    gate("KubeletCrashLoopBackOffMax", Beta, true, false),
    gate("KubeletEnsureSecretPulledImages", Beta, true, false),
    gate("KubeletFineGrainedAuthz", Ga, true, true),
    gate("KubeletInUserNamespace", Beta, true, false),
    gate("KubeletPSI", Ga, true, true),
    gate("KubeletPodResourcesDynamicResources", Ga, true, true),
    gate("KubeletPodResourcesGet", Ga, true, true),
    gate(
        "KubeletPodResourcesListUseActivePods",
        Deprecated,
        true,
        false,
    ),
    gate(
        "KubeletRegistrationGetOnExistsOnly",
        Deprecated,
        false,
        false,
    ),
    gate("KubeletSeparateDiskGC", Beta, true, false),
    gate(
        "KubeletServiceAccountTokenForCredentialProviders",
        Beta,
        true,
        false,
    ),
    gate("KubeletTracing", Ga, true, true),
    gate("ListFromCacheSnapshot", Beta, true, false),
    gate(
        "LocalStorageCapacityIsolationFSQuotaMonitoring",
        Beta,
        false,
        false,
    ),
    gate("LoggingAlphaOptions", Alpha, false, false),
    gate("LoggingBetaOptions", Beta, true, false),
    gate("ManifestBasedAdmissionControlConfig", Beta, true, false),
    gate("MatchLabelKeysInPodAffinity", Ga, true, true),
    gate("MatchLabelKeysInPodTopologySpread", Beta, true, false),
    gate(
        "MatchLabelKeysInPodTopologySpreadSelectorMerge",
        Beta,
        true,
        false,
    ),
    gate("MaxUnavailableStatefulSet", Beta, true, false),
    gate("MemoryQoS", Beta, true, false),
    gate("MultiCIDRServiceAllocator", Ga, true, true),
    gate("MutableCSINodeAllocatableCount", Ga, true, true),
    gate("MutablePVNodeAffinity", Alpha, false, false),
    gate("MutablePodResourcesForSuspendedJobs", Beta, true, false),
    gate(
        "MutableSchedulingDirectivesForSuspendedJobs",
        Beta,
        true,
        false,
    ),
    gate("MutatingAdmissionPolicy", Ga, true, false),
    gate("NFTablesNetlink", Beta, true, false),
    gate("NFTablesProxyMode", Ga, true, true),
    gate("NativeHistograms", Beta, true, false),
    gate("NodeControllerLeaseCircuitBreaker", Beta, true, false),
    gate("NodeDeclaredFeatures", Ga, true, true),
    gate("NodeInclusionPolicyInPodTopologySpread", Ga, true, true),
    gate("NodeLifecycleConditions", Alpha, false, false),
    gate("NodeLogQuery", Ga, true, true),
    gate("NodeSwap", Ga, true, true),
    gate("NominatedNodeNameForExpectation", Beta, true, false),
    gate("OpenAPIEnums", Beta, true, false),
    gate("OpportunisticBatching", Beta, true, false),
    gate("PLEGOnDemandRelist", Ga, true, true),
    gate("PersistentVolumeClaimUnusedSinceTime", Beta, true, false),
    gate("PodAndContainerStatsFromCRI", Beta, false, false),
    gate("PodCertificateRequest", Ga, true, false),
    gate("PodDeletionCost", Beta, true, false),
    gate("PodGroupPreemptionPolicy", Alpha, false, false),
    gate("PodLevelResourceManagers", Beta, false, false),
    gate("PodLevelResources", Beta, true, false),
    gate("PodLevelResourcesFixDefaulting", Beta, true, false),
    gate("PodLevelResourcesFixKubeletQOSClass", Beta, true, false),
    gate("PodLogsQuerySplitStreams", Alpha, false, false),
    gate("PodObservedGenerationTracking", Ga, true, true),
    gate("PodReadyToStartContainersCondition", Ga, true, true),
    gate("PodSchedulingReadiness", Ga, true, true),
    gate("PodTopologyLabelsAdmission", Beta, true, false),
    gate("PodsAPI", Beta, true, false),
    gate("PortForwardWebsockets", Beta, true, false),
    gate("PreferSameTrafficDistribution", Ga, true, true),
    gate("ProcMountType", Ga, true, true),
    gate("QOSReserved", Alpha, false, false),
    gate("RecoverVolumeExpansionFailure", Ga, true, true),
    gate("RecursiveReadOnlyMounts", Ga, true, true),
    gate("ReduceDefaultCrashLoopBackOffDecay", Alpha, false, false),
    gate("RelaxedEnvironmentVariableValidation", Ga, true, true),
    gate("RelaxedServiceNameValidation", Ga, true, true),
    gate("ReloadKubeletClientCAFile", Beta, true, false),
    gate("ReloadKubeletServerCertificateFile", Beta, true, false),
    gate("RemoteRequestHeaderUID", Beta, true, false),
    gate("ResourceHealthStatus", Beta, true, false),
    gate("ResourceHealthStatusMessage", Beta, true, false),
    gate("RestartAllContainersOnContainerExits", Beta, true, false),
    gate("RotateKubeletServerCertificate", Beta, true, false),
    gate("RuntimeClassInImageCriApi", Alpha, false, false),
    gate("SELinuxChangePolicy", Ga, true, true),
    gate("SELinuxMount", Ga, true, false),
    gate("SELinuxMountReadWriteOncePod", Ga, true, true),
    gate("SchedulerAsyncAPICalls", Beta, false, false),
    gate("SchedulerAsyncPreemption", Beta, true, false),
    gate("SchedulerPopFromBackoffQ", Beta, true, false),
    gate("SchedulerPreQueueingHints", Alpha, false, false),
    gate("SeparateCacheWatchRPC", Deprecated, false, true),
    gate("SeparateTaintEvictionController", Ga, true, true),
    gate("ServiceAccountNodeAudienceRestriction", Beta, true, false),
    gate("ServiceAccountTokenJTI", Ga, true, true),
    gate("ServiceAccountTokenNodeBinding", Ga, true, true),
    gate("ServiceAccountTokenNodeBindingValidation", Ga, true, true),
    gate("ServiceAccountTokenPodNodeInfo", Ga, true, true),
    gate("ServiceCIDRStatusFieldWiping", Deprecated, true, false),
    gate("ShardedListAndWatch", Alpha, false, false),
    gate("SizeBasedListCostEstimate", Beta, true, false),
    gate("StaleControllerConsistencyDaemonSet", Beta, true, false),
    gate("StaleControllerConsistencyHPA", Beta, true, false),
    gate("StaleControllerConsistencyJob", Beta, true, false),
    gate("StaleControllerConsistencyReplicaSet", Beta, true, false),
    gate("StaleControllerConsistencyStatefulSet", Beta, true, false),
    gate("StatefulSetRecreateStrategy", Alpha, false, false),
    gate("StatefulSetSemanticRevisionComparison", Beta, true, false),
    gate("StorageCapacityScoring", Beta, true, false),
    gate("StorageNamespaceIndex", Deprecated, true, false),
    gate("StorageVersionAPI", Alpha, false, false),
    gate("StorageVersionHash", Beta, true, false),
    gate("StorageVersionMigrator", Ga, true, false),
    gate("StrictIPCIDRValidation", Beta, true, false),
    gate(
        "StructuredAuthenticationConfigurationEgressSelector",
        Beta,
        true,
        false,
    ),
    gate(
        "StructuredAuthenticationConfigurationJWKSMetrics",
        Beta,
        true,
        false,
    ),
    gate("SupplementalGroupsPolicy", Ga, true, true),
    gate("SystemdWatchdog", Ga, true, true),
    gate("TaintTolerationComparisonOperators", Alpha, false, false),
    gate("TokenRequestServiceAccountUIDValidation", Beta, true, false),
    gate("TopologyAwareWorkloadScheduling", Alpha, false, false),
    gate("TopologyManagerPolicyAlphaOptions", Alpha, false, false),
    gate("TopologyManagerPolicyBetaOptions", Beta, true, false),
    gate("TopologyManagerPolicyOptions", Ga, true, true),
    gate("TranslateStreamCloseWebsocketRequests", Beta, true, false),
    gate("UnauthenticatedHTTP2DOSMitigation", Beta, true, false),
    gate("UnknownVersionInteroperabilityProxy", Beta, true, false),
    gate("UnlockWhileProcessingFIFO", Beta, true, false),
    gate("UserNamespacesHostNetworkSupport", Alpha, false, false),
    gate("UserNamespacesSupport", Ga, true, true),
    gate("VolumeAttributesClass", Ga, true, true),
    gate("VolumeBindMountOptions", Alpha, false, false),
    gate("VolumeLimitScaling", Beta, true, false),
    gate("WatchCacheInitializationPostStartHook", Ga, true, true),
    gate("WatchList", Beta, true, false),
    gate("WatchListClient", Beta, true, false),
    gate("WatchListCompression", Beta, true, false),
    gate("WebhookRoundTripLoadBalancing", Beta, true, false),
    gate("WinDSR", Ga, true, true),
    gate("WinOverlay", Ga, true, true),
    gate("WindowsCPUAndMemoryAffinity", Alpha, false, false),
    gate("WindowsGracefulNodeShutdown", Beta, true, false),
    gate("WindowsHostNetwork", Deprecated, false, false),
    gate("WorkloadWithJob", Alpha, false, false),
];
