//! `tend:plugin/cloud` answered by the adapter.

use super::adapter::PluginCloud;
use super::grants::Operation;
use crate::capabilities::Capability;
use crate::wit::cloud;
use crate::wit::types;

type WitResult<T> = Result<T, types::Error>;

impl cloud::Host for PluginCloud {
    async fn list_instances(&mut self, owner: cloud::OwnerTag) -> WitResult<Vec<cloud::Instance>> {
        let result = PluginCloud::list_instances(self, &owner).await;
        self.call
            .counted(Self::NAME, Operation::ListInstances.name(), result)
    }
    async fn get_instance(&mut self, id: String) -> WitResult<cloud::Instance> {
        let result = PluginCloud::get_instance(self, &id).await;
        self.call
            .counted(Self::NAME, Operation::GetInstance.name(), result)
    }
    async fn delete_instance(&mut self, id: String) -> WitResult<()> {
        let result = PluginCloud::delete_instance(self, &id).await;
        self.call
            .counted(Self::NAME, Operation::DeleteInstance.name(), result)
    }
    async fn list_security_groups(
        &mut self,
        ids: Vec<String>,
    ) -> WitResult<Vec<cloud::SecurityGroup>> {
        let result = PluginCloud::list_security_groups(self, &ids).await;
        self.call
            .counted(Self::NAME, Operation::ListSecurityGroups.name(), result)
    }
    async fn find_security_group(&mut self, name: String) -> WitResult<String> {
        let result = PluginCloud::find_security_group(self, &name).await;
        self.call.counted(Self::NAME, "find-security-group", result)
    }
    async fn ensure_rule(&mut self, group_id: String, rule: cloud::Rule) -> WitResult<bool> {
        let result = PluginCloud::ensure_rule(self, &group_id, &rule).await;
        self.call
            .counted(Self::NAME, Operation::EnsureRule.name(), result)
    }
    async fn add_to_group(&mut self, instance_id: String, group_id: String) -> WitResult<bool> {
        let result = PluginCloud::add_to_group(self, &instance_id, &group_id).await;
        self.call
            .counted(Self::NAME, Operation::AddToGroup.name(), result)
    }
}
