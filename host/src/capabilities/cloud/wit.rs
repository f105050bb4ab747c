//! `tend:plugin/cloud` answered by the adapter.

use super::adapter::PluginCloud;
use super::grants::Operation;
use crate::capabilities::Capability;
use crate::wit::cloud;
use crate::wit::types;

type WitResult<T> = wasmtime::Result<Result<T, types::Error>>;

impl cloud::Host for PluginCloud {
    async fn list_instances(&mut self, owner: cloud::OwnerTag) -> WitResult<Vec<cloud::Instance>> {
        let this = &*self;
        let operation = Operation::ListInstances.name();
        this.call
            .answer(Self::NAME, operation, (owner,), |(owner,)| async move {
                this.list_instances(&owner).await
            })
            .await
    }
    async fn get_instance(&mut self, id: String) -> WitResult<cloud::Instance> {
        let this = &*self;
        let operation = Operation::GetInstance.name();
        this.call
            .answer(Self::NAME, operation, (id,), |(id,)| async move {
                this.get_instance(&id).await
            })
            .await
    }
    async fn delete_instance(&mut self, id: String) -> WitResult<()> {
        let this = &*self;
        let operation = Operation::DeleteInstance.name();
        this.call
            .answer(Self::NAME, operation, (id,), |(id,)| async move {
                this.delete_instance(&id).await
            })
            .await
    }
    async fn list_security_groups(
        &mut self,
        ids: Vec<String>,
    ) -> WitResult<Vec<cloud::SecurityGroup>> {
        let this = &*self;
        let operation = Operation::ListSecurityGroups.name();
        this.call
            .answer(Self::NAME, operation, (ids,), |(ids,)| async move {
                this.list_security_groups(&ids).await
            })
            .await
    }
    async fn find_security_group(&mut self, name: String) -> WitResult<String> {
        let this = &*self;
        this.call
            .answer(Self::NAME, "find-security-group", (name,), |(name,)| async move {
                this.find_security_group(&name).await
            })
            .await
    }
    async fn ensure_rule(&mut self, group_id: String, rule: cloud::Rule) -> WitResult<bool> {
        let this = &*self;
        let operation = Operation::EnsureRule.name();
        this.call
            .answer(Self::NAME, operation, (group_id, rule), |(group, rule)| async move {
                this.ensure_rule(&group, &rule).await
            })
            .await
    }
    async fn add_to_group(&mut self, instance_id: String, group_id: String) -> WitResult<bool> {
        let this = &*self;
        let operation = Operation::AddToGroup.name();
        let args = (instance_id, group_id);
        this.call
            .answer(Self::NAME, operation, args, |(instance, group)| async move {
                this.add_to_group(&instance, &group).await
            })
            .await
    }
}
