"""On-demand instance prices from the AWS Price List API, and cost per 1,000 queries.

A price is either looked up (needs AWS credentials) or given by the user; the tool never invents one —
with neither, the cost is reported as unknown together with how to supply it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

# The Price List query API is served from us-east-1 (also eu-central-1, ap-south-1); prices for every
# region come from it.
PRICING_API_REGION = "us-east-1"

HOW_TO_SUPPLY = (
    "pass --price-per-hour USD (per instance) or configure AWS credentials so the AWS Price List API can be queried"
)


class PricingError(Exception):
    """The Price List API gave no usable single on-demand price."""


@dataclass(frozen=True)
class Price:
    usd_per_hour: float | None
    source: str  # "aws-price-list" | "--price-per-hour" | "unknown"
    detail: str

    @property
    def known(self) -> bool:
        return self.usd_per_hour is not None

    def to_dict(self) -> dict[str, Any]:
        return {"usd_per_hour": self.usd_per_hour, "source": self.source, "detail": self.detail}


def product_filters(instance_type: str, region: str) -> tuple[str, list[dict[str, str]]]:
    """ServiceCode and TERM_MATCH filters selecting one on-demand Linux price for `instance_type`.

    Products carry a `regionCode` attribute (us-east-1, ...), so no table of location names is needed."""

    def tm(field: str, value: str) -> dict[str, str]:
        return {"Type": "TERM_MATCH", "Field": field, "Value": value}

    if instance_type.startswith("ml."):
        # SageMaker names the instance in `instanceName`; its `instanceType` is "ml.x.y-hosting" style and
        # differs per component (Hosting = real-time endpoints; Training, Notebook, ... are other SKUs).
        return "AmazonSageMaker", [
            tm("instanceName", instance_type),
            tm("regionCode", region),
            tm("component", "Hosting"),
        ]
    return "AmazonEC2", [
        tm("instanceType", instance_type),
        tm("regionCode", region),
        tm("operatingSystem", "Linux"),
        tm("tenancy", "Shared"),
        tm("preInstalledSw", "NA"),
        tm("capacitystatus", "Used"),
    ]


def on_demand_hourly(price_list: list[str]) -> list[float]:
    """USD per hour of every OnDemand price dimension in GetProducts' PriceList (entries are JSON strings)."""
    prices: list[float] = []
    for entry in price_list:
        product = json.loads(entry) if isinstance(entry, str) else entry
        for term in (product.get("terms", {}).get("OnDemand") or {}).values():
            for dim in (term.get("priceDimensions") or {}).values():
                usd = (dim.get("pricePerUnit") or {}).get("USD")
                unit = (dim.get("unit") or "").lower()
                if usd is None or unit not in ("hrs", "hr", "hour", "hours"):
                    continue
                value = float(usd)
                if value > 0:
                    prices.append(value)
    return prices


def lookup_price(instance_type: str, region: str, *, client: Any = None) -> Price:
    """The on-demand USD/hour for `instance_type` in `region` from the Price List API.

    `client` is a boto3 `pricing` client (created in us-east-1 when omitted). Raises PricingError when
    the API returns no price or several different ones — a guess would be a made-up number."""
    if client is None:
        import boto3

        client = boto3.client("pricing", region_name=PRICING_API_REGION)
    service, filters = product_filters(instance_type, region)
    entries: list[str] = []
    kwargs: dict[str, Any] = {"ServiceCode": service, "Filters": filters, "FormatVersion": "aws_v1", "MaxResults": 100}
    for _ in range(10):  # bounded pagination; a precise filter returns one or two products
        page = client.get_products(**kwargs)
        entries.extend(page.get("PriceList", []))
        token = page.get("NextToken")
        if not token:
            break
        kwargs["NextToken"] = token
    prices = sorted(set(on_demand_hourly(entries)))
    if not prices:
        raise PricingError(f"the AWS Price List API has no on-demand price for {instance_type} in {region} ({service})")
    if len(prices) > 1:
        raise PricingError(
            f"the AWS Price List API returned several on-demand prices for {instance_type} in {region}: {', '.join(f'${p}' for p in prices)}"
        )
    return Price(prices[0], "aws-price-list", f"{service} on-demand {instance_type} {region} (AWS Price List API)")


def have_credentials() -> bool:
    import boto3

    try:
        return boto3.session.Session().get_credentials() is not None
    except Exception:  # a broken profile is the same as none for this purpose
        return False


def resolve_price(
    instance_type: str | None,
    region: str,
    *,
    price_per_hour: float | None = None,
    client: Any = None,
    credentials: bool | None = None,
) -> Price:
    """--price-per-hour wins (it is how Spot, Savings Plans or another cloud get priced); otherwise the
    Price List API when credentials exist; otherwise unknown, saying how to supply a price."""
    if price_per_hour is not None:
        if price_per_hour <= 0:
            raise ValueError("--price-per-hour must be > 0")
        return Price(
            float(price_per_hour),
            "--price-per-hour",
            f"given on the command line for {instance_type or 'the endpoint'}",
        )
    if not instance_type:
        return Price(None, "unknown", f"no --instance-type: {HOW_TO_SUPPLY}")
    if client is None and not (credentials if credentials is not None else have_credentials()):
        return Price(None, "unknown", f"no AWS credentials: {HOW_TO_SUPPLY}")
    try:
        return lookup_price(instance_type, region, client=client)
    except PricingError as exc:
        return Price(None, "unknown", f"{exc}; {HOW_TO_SUPPLY}")
    except Exception as exc:  # botocore errors (AccessDenied, no network): report, do not guess
        return Price(None, "unknown", f"AWS Price List API call failed ({type(exc).__name__}: {exc}); {HOW_TO_SUPPLY}")


def queries_per_hour(qps: float) -> float:
    return qps * 3600.0


def cost_per_1k_queries(usd_per_hour: float | None, qps: float, *, instances: int = 1) -> float | None:
    """USD per 1,000 queries for an endpoint of `instances` instances that sustained `qps` in total
    (None when the price is unknown or nothing succeeded)."""
    if usd_per_hour is None or qps <= 0:
        return None
    return usd_per_hour * instances / queries_per_hour(qps) * 1000.0
