"""The framework's network check on one synthesized environment (infra/network.py), for whatever settings it has.

Registered with the other template checks (``tests/infra/checks.py``), so it holds for the repository's own cdk.json
(``tests/infra/test_repository.py``) and a team's edits of it (``tests/edits``): where the stack creates its VPC,
gateway endpoints for DynamoDB and S3 on every route table, the flow log kept as long as the environment's logs, and
the tasks behind NAT without a public IP, or with one in a public subnet where there is no NAT; in an existing VPC,
nothing of the network created and the tasks in its private subnets. Never a rule admitting anything inbound.
"""

from __future__ import annotations

from typing import Any

from infra.network import MAX_AZS

#: The endpoint services, as the end of each endpoint's ServiceName (``com.amazonaws.<region>.<service>``).
GATEWAY_SERVICES = ("dynamodb", "s3")


def of_type(env: Any, resource_type: str) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in env.json["Resources"].items() if r["Type"] == resource_type}


def service_name_suffix(endpoint: dict[str, Any]) -> str:
    """``dynamodb`` for ``{"Fn::Join": ["", ["com.amazonaws.", {"Ref": "AWS::Region"}, ".dynamodb"]]}``."""
    name = endpoint["Properties"]["ServiceName"]
    parts = name["Fn::Join"][1] if isinstance(name, dict) else [name]
    return str(parts[-1]).rsplit(".", 1)[-1]


def check_network(env: Any) -> None:
    """Where the tasks run and what the VPC the stack creates holds (the module's docstring says what)."""
    settings = env.stack.settings
    name = settings.name
    problems: list[str] = []
    services = of_type(env, "AWS::ECS::Service")
    subnets = of_type(env, "AWS::EC2::Subnet")
    public = sorted(k for k, s in subnets.items() if s["Properties"].get("MapPublicIpOnLaunch"))
    private = sorted(k for k in subnets if k not in public)
    created = settings.vpc is None
    without_nat = created and settings.nat_gateways == 0
    if created:
        nat = len(of_type(env, "AWS::EC2::NatGateway"))
        if nat != min(settings.nat_gateways, MAX_AZS):
            problems.append(f"{name}: {nat} NAT gateways for nat_gateways {settings.nat_gateways}")
        if without_nat and (private or of_type(env, "AWS::EC2::EIP")):
            problems.append(f"{name}: without NAT, private subnets {private} or an Elastic IP remain")
        tables = sorted(of_type(env, "AWS::EC2::RouteTable"))
        endpoints = {service_name_suffix(e): e["Properties"] for e in of_type(env, "AWS::EC2::VPCEndpoint").values()}
        for service in GATEWAY_SERVICES:
            endpoint = endpoints.get(service)
            if endpoint is None or endpoint.get("VpcEndpointType") != "Gateway":
                problems.append(f"{name}: no {service} gateway endpoint")
            elif sorted(r["Ref"] for r in endpoint["RouteTableIds"]) != tables:
                problems.append(f"{name}: the {service} endpoint is not on every route table {tables}")
        logs = of_type(env, "AWS::Logs::LogGroup")
        flow_logs = list(of_type(env, "AWS::EC2::FlowLog").values())
        if len(flow_logs) != 1 or flow_logs[0]["Properties"]["TrafficType"] != "ALL":
            problems.append(f"{name}: not one flow log of all traffic: {flow_logs}")
        else:
            group = logs[flow_logs[0]["Properties"]["LogGroupName"]["Ref"]]["Properties"]
            if group.get("RetentionInDays") != settings.log_retention_days:
                problems.append(
                    f"{name}: the flow log keeps {group.get('RetentionInDays')} days, the environment's logs"
                    f" {settings.log_retention_days}"
                )
    else:
        for kind in ("AWS::EC2::VPC", "AWS::EC2::VPCEndpoint", "AWS::EC2::FlowLog", "AWS::EC2::NatGateway"):
            if of_type(env, kind):
                problems.append(f"{name}: an existing VPC, yet the stack creates {kind}")
    expected_subnets = (
        [{"Ref": k} for k in public]
        if without_nat
        else [{"Ref": k} for k in private]
        if created
        else list(settings.vpc.private_subnet_ids)
    )
    for key, service in services.items():
        network = service["Properties"]["NetworkConfiguration"]["AwsvpcConfiguration"]
        public_ip = "ENABLED" if without_nat else "DISABLED"
        if network["AssignPublicIp"] != public_ip:
            problems.append(f"{name}: {key} has AssignPublicIp {network['AssignPublicIp']}, expected {public_ip}")
        if sorted(map(str, network["Subnets"])) != sorted(map(str, expected_subnets)):
            problems.append(f"{name}: {key} runs in {network['Subnets']}, expected {expected_subnets}")
        for group in network["SecurityGroups"]:
            logical_id = group["Fn::GetAtt"][0]
            if env.json["Resources"][logical_id]["Properties"].get("SecurityGroupIngress"):
                problems.append(f"{name}: {key}'s security group {logical_id} admits traffic in")
            problems += [
                f"{name}: {rule} admits traffic into {key}'s security group {logical_id}"
                for rule, r in of_type(env, "AWS::EC2::SecurityGroupIngress").items()
                if r["Properties"].get("GroupId") == group
            ]
    assert not problems, f"network: {len(problems)} problem(s)\n" + "\n".join(problems)
