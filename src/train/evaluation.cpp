// Trainer::evaluate: the loss (and top-1 accuracy for classification) over a source in
// evaluation mode, without keeping activations.
#include "stoker/core/error.h"
#include "stoker/nn/containers.h"
#include "stoker/train/trainer.h"
#include "train/trainer_impl.h"

namespace stoker::train {

EvalResult Trainer::Impl::evaluate(data::BatchSource& data, int64_t max_samples) {
  STOKER_CHECK(max_samples >= 0, "Trainer::evaluate: max_samples ", max_samples,
               " must be >= 0 (0: the whole source)");
  optimizer_.flush();  // evaluate the weights after the last step's update
  const bool was_training = model_.training();
  model_.set_training(false);
  nn::NoSaveScope no_save;  // no backward follows: keep no activations
  data.start_epoch(0);
  EvalResult r;
  double loss_sum = 0.0;
  int64_t correct = 0, predictions = 0;
  bool classification = true;
  data::Batch batch;
  while ((max_samples == 0 || r.samples < max_samples) && data.next(batch)) {
    const Tensor y = model_.forward(batch.input);
    const Tensor l = loss_.forward(y, batch.target);
    loss_sum += l.item() * static_cast<double>(batch.size);
    classification = classification && loss_.predictions_are_scores() && y.rank() == 2 &&
                     (batch.target.dtype() == DType::i32 || batch.target.dtype() == DType::i64);
    if (classification) {
      const std::vector<float> logits = y.to_floats();
      const std::vector<float> target = batch.target.to_floats();
      const int64_t classes = y.size(1);
      for (int64_t i = 0; i < y.size(0); ++i) {
        int64_t best = 0;
        for (int64_t c = 1; c < classes; ++c)
          if (logits[i * classes + c] > logits[i * classes + best]) best = c;
        correct += best == static_cast<int64_t>(target[i]);
      }
      predictions += y.size(0);  // a language model predicts every position of a sample
    }
    r.samples += batch.size;
  }
  model_.set_training(was_training);
  if (r.samples > 0) {
    r.loss = loss_sum / static_cast<double>(r.samples);
    if (classification && predictions > 0)
      r.accuracy = static_cast<double>(correct) / static_cast<double>(predictions);
  }
  return r;
}

}  // namespace stoker::train
