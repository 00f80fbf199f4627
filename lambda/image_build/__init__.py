"""Deploy-time image build: CDK Provider handlers that run the build workflow and return its digest."""
