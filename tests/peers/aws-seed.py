#!/usr/bin/env python3
"""EC2 calls for tests, through boto3 (which moto[server] brings into target/venv): tests
create the state Tend's AWS backend then finds (instances with tags, security groups)
through moto itself, and read it back through the same API.

    aws-seed.py ENDPOINT run-instances --count N [--tag KEY=VALUE]... [--group SG_ID]...
                                       [--type t3.micro] [--separate]
                                       [--interface SG_ID[,SG_ID...]]...
        prints the new instance ids (a JSON list); with --interface, each instance gets
        one network interface per --interface, in these groups (the first is the primary
        one, the others are created and attached after it, as the VPC CNI does), and
        --group is not used
    aws-seed.py ENDPOINT create-security-group --name NAME [--description TEXT]
        prints the new group id (a JSON string)
    aws-seed.py ENDPOINT call OPERATION [JSON]
        any boto3 EC2 operation (snake_case, e.g. describe_security_groups) with JSON
        keyword arguments; prints the response (JSON, ResponseMetadata dropped)
    aws-seed.py ENDPOINT paginate OPERATION [JSON]
        every page of a paginated operation (JSON may carry "PaginationConfig":
        {"PageSize": 5}); prints {"pages": [...]} in order

The tests call its run() through tests/peers/aws-zygote.py (one warm process per test
process, which imports it once); it also runs alone. Region us-east-1, credentials
"testing" (moto accepts any), one attempt per call (no retries: a fault the proxy
injects reaches the caller). A failed call prints
"ERROR <status> <code> <message>" on stderr (status "-" when the answer was not EC2's,
e.g. moto's HTML 500) and exits 1.
"""
import argparse
import json
import os
import sys

import boto3
import botocore.config
import botocore.exceptions
import botocore.parsers

AMI = "ami-12c6146b"  # one of moto's default images


def client(endpoint):
    return boto3.client("ec2", endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id="testing", aws_secret_access_key="testing",
                        config=botocore.config.Config(retries={"total_max_attempts": 1, "mode": "standard"}))


def clean(response):
    response.pop("ResponseMetadata", None)
    return response


def default_subnet(ec2):
    """A subnet of the default VPC (where the groups tests create are)."""
    subnets = ec2.describe_subnets(Filters=[{"Name": "default-for-az", "Values": ["true"]}])
    return sorted(s["SubnetId"] for s in subnets["Subnets"])[0]


class SeedError(Exception):
    """A failed call, as its "ERROR <status> <code> <message>" line."""


def parser():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("endpoint")
    sub = ap.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run-instances")
    run.add_argument("--count", type=int, default=1)
    run.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE")
    run.add_argument("--group", action="append", default=[], metavar="SG_ID")
    run.add_argument("--type", default="t3.micro")
    run.add_argument("--interface", action="append", default=[], metavar="SG_ID[,SG_ID...]")
    run.add_argument("--separate", action="store_true",
                     help="one RunInstances call (one reservation) per instance: moto pages "
                          "DescribeInstances by reservation, so instances meant to page need this")
    sg = sub.add_parser("create-security-group")
    sg.add_argument("--name", required=True)
    sg.add_argument("--description", default="created by a Tend test")
    for name in ("call", "paginate"):
        p = sub.add_parser(name)
        p.add_argument("operation")
        p.add_argument("arguments", nargs="?", default="{}")
    return ap


def run(argv):
    """The JSON-ready output of one command line (without the program name);
    raises SeedError for a failed call."""
    args = parser().parse_args(argv)
    ec2 = client(args.endpoint)
    try:
        if args.command == "run-instances":
            kwargs = {"ImageId": AMI, "MinCount": args.count, "MaxCount": args.count,
                      "InstanceType": args.type}
            if args.tag:
                tags = [dict(zip(("Key", "Value"), t.split("=", 1))) for t in args.tag]
                kwargs["TagSpecifications"] = [{"ResourceType": "instance", "Tags": tags}]
            if args.group:
                kwargs["SecurityGroupIds"] = args.group
            interfaces = [groups.split(",") for groups in args.interface]
            if interfaces:
                # The ENIs' groups are their own: moto adds an instance's launch groups to
                # every ENI attached to it, which EC2 does not.
                subnet = default_subnet(ec2)
                kwargs.pop("SecurityGroupIds", None)
                kwargs["NetworkInterfaces"] = [{"DeviceIndex": 0, "SubnetId": subnet,
                                                "Groups": interfaces[0]}]
            if args.separate:
                kwargs["MinCount"] = kwargs["MaxCount"] = 1
            out = [i["InstanceId"] for _ in range(args.count if args.separate else 1)
                   for i in ec2.run_instances(**kwargs)["Instances"]]
            for instance in out if interfaces else []:
                for index, groups in enumerate(interfaces[1:], start=1):
                    eni = ec2.create_network_interface(SubnetId=subnet, Groups=groups)
                    ec2.attach_network_interface(InstanceId=instance, DeviceIndex=index,
                                                 NetworkInterfaceId=eni["NetworkInterface"]["NetworkInterfaceId"])
        elif args.command == "create-security-group":
            out = ec2.create_security_group(GroupName=args.name, Description=args.description)["GroupId"]
        elif args.command == "call":
            out = clean(getattr(ec2, args.operation)(**json.loads(args.arguments)))
        else:
            pages = ec2.get_paginator(args.operation).paginate(**json.loads(args.arguments))
            out = {"pages": [clean(page) for page in pages]}
    except botocore.exceptions.ClientError as e:
        err = e.response.get("Error", {})
        status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        raise SeedError(f"ERROR {status} {err.get('Code')} {err.get('Message')}") from None
    except (botocore.exceptions.BotoCoreError, botocore.parsers.ResponseParserError) as e:
        raise SeedError(f"ERROR - {type(e).__name__} {str(e).splitlines()[0]}") from None
    return out


def main():
    try:
        out = run(sys.argv[1:])
    except SeedError as e:
        print(e, file=sys.stderr)
        sys.exit(1)
    json.dump(out, sys.stdout, default=str)
    print()


os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
if __name__ == "__main__":
    main()
