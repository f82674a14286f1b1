"""CodeBuild and ECR: buildspecs checked before they run (lint), run here (runner), started and
watched there (codebuild), images found and promoted by digest (ecr), guarded images pushed to ECR or
a loopback registry (publish). boto3 is imported only by the modules that call AWS, so the rest works
without the `aws` extra."""
