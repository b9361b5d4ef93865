"""What a broker of each role runs for replication: a master runs the HA service, a slave the
HA client; both sample the diff."""

from __future__ import annotations

from ha.client import HAClient, SlaveLinkView
from ha.config import HAConfig
from ha.diff import DiffSampler, MasterDiff, master_diff
from ha.service import HAService
from store.message_store import MessageStore
from store.status import BrokerRole


class Replication:
    def __init__(self, config: HAConfig, store: MessageStore) -> None:
        config.check_authentication()
        self.config = config
        self.store = store
        self.service: HAService | None = None
        self.client: HAClient | None = None
        if config.broker_role is BrokerRole.SLAVE:
            self.client = HAClient(config, store)
            source: HAService | HAClient = self.client
        else:
            self.service = HAService(config, store)
            source = self.service
        self.sampler = DiffSampler(source, config.ha_diff_log_interval_s,
                                   config.ha_diff_samples_max)

    def start(self) -> None:
        if self.service is not None:
            self.service.start()
        if self.client is not None:
            self.client.start()
        self.sampler.start()

    def stop(self) -> None:
        self.sampler.stop()
        if self.client is not None:
            self.client.stop()
        if self.service is not None:
            self.service.stop()

    def diff(self) -> MasterDiff | SlaveLinkView:
        if self.service is not None:
            return master_diff(self.service)
        assert self.client is not None
        return self.client.view()
