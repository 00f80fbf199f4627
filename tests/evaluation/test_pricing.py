"""Cost arithmetic on fixed inputs, and the AWS Price List path through botocore's Stubber (the request
botocore would send is validated against the real service model; responses use the API's shape)."""

from __future__ import annotations

import json

import botocore.session
import pytest
from botocore.stub import Stubber

from cpu_inference.evaluation.pricing import (
    HOW_TO_SUPPLY,
    PricingError,
    cost_per_1k_queries,
    lookup_price,
    on_demand_hourly,
    product_filters,
    queries_per_hour,
    resolve_price,
)


def test_cost_per_1k_queries_on_fixed_inputs() -> None:
    # $1.1592/h at 10 queries/s: 36,000 queries an hour -> $1.1592 / 36 = $0.0322 per 1,000.
    assert queries_per_hour(10) == 36_000
    assert cost_per_1k_queries(1.1592, 10) == pytest.approx(0.0322)
    assert cost_per_1k_queries(1.1592, 10, instances=2) == pytest.approx(
        0.0644
    )  # 2 instances sustained 10 qps together
    assert cost_per_1k_queries(0.0816, 0.5) == pytest.approx(0.0816 / 1.8)
    assert cost_per_1k_queries(None, 10) is None
    assert cost_per_1k_queries(1.1592, 0) is None


def price_list_entry(
    instance_type: str,
    service: str,
    usd: str,
    *,
    region: str = "us-east-1",
    location: str = "US East (N. Virginia)",
    reserved: bool = True,
) -> str:
    """One GetProducts PriceList entry as the API returns it: a JSON *string*, with the attributes the
    real products carry (EC2: instanceType; SageMaker: instanceName, instanceType "<name>-hosting",
    component)."""
    sku = "J8Q3FZ5K2B7XYW9N"
    if service == "AmazonEC2":
        family = "Compute Instance"
        attributes = {
            "instanceType": instance_type,
            "location": location,
            "locationType": "AWS Region",
            "regionCode": region,
            "operatingSystem": "Linux",
            "tenancy": "Shared",
            "preInstalledSw": "NA",
            "capacitystatus": "Used",
            "licenseModel": "No License required",
            "operation": "RunInstances",
            "usagetype": f"BoxUsage:{instance_type}",
            "vcpu": "32",
            "memory": "64 GiB",
            "physicalProcessor": "AWS Graviton3",
            "servicecode": service,
        }
    else:
        family = "ML Instance"
        attributes = {
            "instanceName": instance_type,
            "instanceType": f"{instance_type}-hosting",
            "component": "Hosting",
            "location": location,
            "locationType": "AWS Region",
            "regionCode": region,
            "operation": "RunInstance",
            "usagetype": f"EU-Host:{instance_type}",
            "vCpu": "32",
            "memory": "64 GiB",
            "servicecode": service,
            "servicename": "Amazon SageMaker",
        }
    entry = {
        "product": {"productFamily": family, "attributes": attributes, "sku": sku},
        "serviceCode": service,
        "terms": {
            "OnDemand": {
                f"{sku}.JRTCKXETXF": {
                    "priceDimensions": {
                        f"{sku}.JRTCKXETXF.6YS6EN2CT7": {
                            "unit": "Hrs",
                            "endRange": "Inf",
                            "description": f"${usd} per On Demand Linux {instance_type} Instance Hour",
                            "appliesTo": [],
                            "rateCode": f"{sku}.JRTCKXETXF.6YS6EN2CT7",
                            "beginRange": "0",
                            "pricePerUnit": {"USD": usd},
                        }
                    },
                    "sku": sku,
                    "effectiveDate": "2026-11-01T00:00:00Z",
                    "offerTermCode": "JRTCKXETXF",
                    "termAttributes": {},
                }
            },
        },
        "version": "20261101000000",
        "publicationDate": "2026-11-01T00:00:00Z",
    }
    if reserved:
        # Reserved terms carry an upfront "Quantity" dimension and a lower hourly rate: neither is on-demand.
        entry["terms"]["Reserved"] = {
            f"{sku}.4NA7Y494T4": {
                "priceDimensions": {
                    f"{sku}.4NA7Y494T4.2TG2D8R56U": {"unit": "Quantity", "pricePerUnit": {"USD": "5000"}},
                    f"{sku}.4NA7Y494T4.6YS6EN2CT7": {"unit": "Hrs", "pricePerUnit": {"USD": "0.5"}},
                }
            }
        }
    return json.dumps(entry)


def matches(entry: str, filters: list[dict[str, str]]) -> bool:
    """What TERM_MATCH does server-side: every filtered attribute equals the value."""
    attrs = json.loads(entry)["product"]["attributes"]
    return all(attrs.get(f["Field"]) == f["Value"] for f in filters)


@pytest.fixture
def pricing_client():
    session = botocore.session.get_session()
    client = session.create_client(
        "pricing", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def test_ec2_price_from_price_list(pricing_client) -> None:
    client, stubber = pricing_client
    service, filters = product_filters("c7g.8xlarge", "us-east-1")
    assert service == "AmazonEC2"
    assert {f["Field"]: f["Value"] for f in filters} == {
        "instanceType": "c7g.8xlarge",
        "regionCode": "us-east-1",
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
    }
    stubber.add_response(
        "get_products",
        {"FormatVersion": "aws_v1", "PriceList": [price_list_entry("c7g.8xlarge", "AmazonEC2", "1.1568000000")]},
        expected_params={"ServiceCode": "AmazonEC2", "Filters": filters, "FormatVersion": "aws_v1", "MaxResults": 100},
    )
    assert matches(
        price_list_entry("c7g.8xlarge", "AmazonEC2", "1.1568000000"), filters
    )  # the filters select the recorded product
    price = lookup_price("c7g.8xlarge", "us-east-1", client=client)
    assert price.usd_per_hour == pytest.approx(1.1568)
    assert price.source == "aws-price-list"


def test_sagemaker_ml_instance_uses_sagemaker_service_code_and_paginates(pricing_client) -> None:
    client, stubber = pricing_client
    service, filters = product_filters("ml.c7g.8xlarge", "eu-west-1")
    assert service == "AmazonSageMaker"
    # SageMaker products name the instance in instanceName; their instanceType is "ml.c7g.8xlarge-hosting".
    assert {f["Field"]: f["Value"] for f in filters} == {
        "instanceName": "ml.c7g.8xlarge",
        "regionCode": "eu-west-1",
        "component": "Hosting",
    }
    entry = price_list_entry(
        "ml.c7g.8xlarge", "AmazonSageMaker", "1.5650000000", region="eu-west-1", location="EU (Ireland)", reserved=False
    )
    assert matches(entry, filters)
    assert not matches(entry, [{"Type": "TERM_MATCH", "Field": "instanceType", "Value": "ml.c7g.8xlarge"}])
    base = {"ServiceCode": "AmazonSageMaker", "Filters": filters, "FormatVersion": "aws_v1", "MaxResults": 100}
    stubber.add_response(
        "get_products", {"FormatVersion": "aws_v1", "PriceList": [], "NextToken": "page-2"}, expected_params=base
    )
    stubber.add_response(
        "get_products",
        {"FormatVersion": "aws_v1", "PriceList": [entry]},
        expected_params={**base, "NextToken": "page-2"},
    )
    assert lookup_price("ml.c7g.8xlarge", "eu-west-1", client=client).usd_per_hour == pytest.approx(1.565)


def test_any_region_is_filtered_by_region_code() -> None:
    _, filters = product_filters("c8g.large", "xx-future-1")
    assert {"Type": "TERM_MATCH", "Field": "regionCode", "Value": "xx-future-1"} in filters


def test_ambiguous_or_missing_prices_are_never_guessed(pricing_client) -> None:
    client, stubber = pricing_client
    stubber.add_response(
        "get_products",
        {
            "FormatVersion": "aws_v1",
            "PriceList": [
                price_list_entry("c7g.large", "AmazonEC2", "0.0723"),
                price_list_entry("c7g.large", "AmazonEC2", "0.0800"),
            ],
        },
    )
    with pytest.raises(PricingError, match="several on-demand prices"):
        lookup_price("c7g.large", "us-east-1", client=client)
    stubber.add_response("get_products", {"FormatVersion": "aws_v1", "PriceList": []})
    price = resolve_price("c7g.large", "us-east-1", client=client)
    assert price.usd_per_hour is None and "no on-demand price" in price.detail and HOW_TO_SUPPLY in price.detail


def test_api_errors_leave_the_cost_unknown(pricing_client) -> None:
    client, stubber = pricing_client
    stubber.add_client_error(
        "get_products",
        service_error_code="AccessDeniedException",
        service_message="not authorized",
        http_status_code=400,
    )
    price = resolve_price("c7g.large", "us-east-1", client=client)
    assert price.usd_per_hour is None and "AccessDeniedException" in price.detail and HOW_TO_SUPPLY in price.detail


def test_price_sources_in_order() -> None:
    given = resolve_price("c7g.large", "us-east-1", price_per_hour=0.0723, credentials=True)
    assert (given.usd_per_hour, given.source) == (0.0723, "--price-per-hour")
    none = resolve_price("c7g.large", "us-east-1", credentials=False)
    assert none.usd_per_hour is None and none.source == "unknown" and "--price-per-hour" in none.detail
    assert resolve_price(None, "us-east-1", credentials=True).usd_per_hour is None
    with pytest.raises(ValueError):
        resolve_price("c7g.large", "us-east-1", price_per_hour=0)


def test_on_demand_hourly_ignores_non_hourly_and_zero_dimensions() -> None:
    entry = json.loads(price_list_entry("c7g.large", "AmazonEC2", "0.0723"))
    dims = next(iter(entry["terms"]["OnDemand"].values()))["priceDimensions"]
    dims["x"] = {"unit": "Quantity", "pricePerUnit": {"USD": "99"}}
    dims["y"] = {"unit": "Hrs", "pricePerUnit": {"USD": "0.0000000000"}}
    assert on_demand_hourly([json.dumps(entry)]) == [0.0723]
