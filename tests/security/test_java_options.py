"""The Java form of fluvial's client settings, for Spark's Kafka connector."""

from __future__ import annotations

from fluvial.kafka.security import java_client_options


def test_java_options_carry_sasl_and_the_pem_truststore() -> None:
    options = java_client_options(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "app",
            "sasl.password": 'p"w',
            "ssl.ca.location": "/etc/ca.pem",
        }
    )
    assert options == {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
        'required username="app" password="p\\"w";',
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": "/etc/ca.pem",
    }
