"""Per-model autoscaling of SageMaker inference components: the Custom::InferenceComponentScaling handler."""
