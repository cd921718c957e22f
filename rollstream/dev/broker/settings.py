"""Settings of the local Kafka broker (``ROLLSTREAM_KAFKA_*``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class BrokerSettings(BaseSettings):
    """How ``rollstream kafka start`` and the test fixture run the local broker."""

    model_config = SettingsConfigDict(
        env_prefix="ROLLSTREAM_KAFKA_", frozen=True, extra="ignore", hide_input_in_errors=True
    )

    version: str = Field(default="4.1.2", description="Apache Kafka version (Maven Central).")
    port: int = Field(
        default=9092,
        ge=0,
        le=65535,
        description="Preferred client port on 127.0.0.1; another free port if taken, 0 for any.",
    )
    nodes: int = Field(
        default=1,
        ge=1,
        le=9,
        description="KRaft nodes (each broker and controller); 3 for a replicated cluster with "
        "topics of 3 replicas and min.insync.replicas 2. Client ports follow PORT.",
    )
    controller_port: int = Field(
        default=0, ge=0, le=65535, description="KRaft controller port; 0 for any free port."
    )
    data_dir: Path | None = Field(
        default=None, description="Broker data and logs. Default: STATE_DIR/kafka."
    )
    secure: bool = Field(
        default=False,
        description="Clients only over SASL_SSL with SCRAM-SHA-512, a principal per service "
        "and least-privilege ACLs (a CA, certificates and passwords under DATA_DIR/secure). "
        "A data directory keeps the choice it was formatted with: starting it otherwise is "
        "refused.",
    )
    secure_dir: Path | None = Field(
        default=None,
        description="With SECURE, where the CA, the broker's certificate and the passwords are. "
        "Default: DATA_DIR/secure, made on first start. Set, it must hold them already "
        "(`rollstream kafka secrets DIR` makes them) and may be read-only.",
    )
    heap: str = Field(default="1g", description="JVM maximum heap (-Xmx).")
    start_timeout: float = Field(default=90.0, gt=0, description="Seconds to wait for ready.")
    java: str = Field(default="java", description="The java executable.")
    mvn: str = Field(default="mvn", description="The Maven executable (fetches the jars once).")
