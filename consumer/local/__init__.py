"""Development only, excluded from the image: the local stack provisioned from ``cdk.out`` on moto,\nand the demo that runs the whole system on it."""
