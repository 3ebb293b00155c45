"""The Java form of fluvial's client settings, for Spark's Kafka connector."""

from __future__ import annotations

import pytest

from fluvial.errors import ConfigError
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


def test_an_inline_pem_ca_becomes_the_truststore_certificates() -> None:
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    options = java_client_options({"security.protocol": "SSL", "ssl.ca.pem": pem}, prefix="")
    assert options == {
        "security.protocol": "SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.certificates": pem,
    }


def test_a_client_certificate_is_refused_unless_its_keystore_is_given() -> None:
    settings = {
        "security.protocol": "SSL",
        "ssl.certificate.location": "/etc/client.pem",
        "ssl.key.location": "/etc/client.key",
        "ssl.key.password": "never-shown",
    }
    with pytest.raises(ConfigError, match="ssl.certificate.location, ssl.key.location") as error:
        java_client_options(settings)
    assert "never-shown" not in str(error.value)
    keystore = {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "/etc/client.p12"}
    options = java_client_options(settings, prefix="", overrides=keystore)
    assert options == {"security.protocol": "SSL"}
